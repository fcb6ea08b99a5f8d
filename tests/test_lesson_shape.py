"""The lesson as a learner meets it: the demo, the file's section order, the shipped skill."""

from __future__ import annotations

import ast
import fcntl
import os
import re
import subprocess
import sys
import unittest

from helpers.support import CODE, PRINCIPAL, ROOT, call, make_server, tps

import main

# The lesson's headings, in the lesson's order, with the tool's flow assembled after the
# response branches: the banners of code/main.py.
SECTIONS = [
    "The two problems, and explicit scope (Roots as a migration surface)",
    "The three-layer rule: authorization, containment, sandbox",
    "Elicitation delivered as input_required",
    "Capability negotiation per request",
    "Form mode",
    "Response branches",
    "The two-call flow, in one place: notes_delete",
    "Protecting destructive MRTR state: signing the state",
    "Protecting destructive MRTR state: the replay store",
    "Protecting destructive MRTR state: the live re-check",
    "The protocol frame: handle() and the JSON-RPC envelope",
    "The protocol frame: server/discover",
    "The protocol frame: tools/list",
    "The protocol frame: tools/call",
    "The demo",
]


MAX_LESSON_LINES = 1082  # main.py: the card with every check it keeps; what only the product needs lives elsewhere
MAX_DEMO_LINES = 250  # the demo's five exchanges as indented JSON, the form and the notes left
DEMO_WIDTH = 100  # characters in one line of the demo


def run_demo() -> subprocess.CompletedProcess[str]:
    """`python3 code/main.py`, as a learner runs it from the root."""
    return subprocess.run(
        [sys.executable, os.path.join(CODE, "main.py")], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


class Demo(unittest.TestCase):
    def test_the_demo_prints_the_two_call_flow_and_the_notes_left_in_at_most_250_lines(self) -> None:
        done = run_demo()
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = done.stdout.splitlines()
        self.assertLessEqual(len(lines), MAX_DEMO_LINES)
        out = done.stdout
        for expected in ('"method": "server/discover"', '"method": "tools/list"', '"resultType": "input_required"',
                         '"id": 2,', '"structuredContent": {"deleted": true, "noteId": "note-14"}', "Notes left"):
            self.assertIn(expected, out)
        left = out.split("Notes left", 1)[1]
        self.assertNotIn("note-14", left)
        for kept in ("note-3", "note-7", "note-99", "evil-1", "tmp-1"):
            self.assertIn(kept, left)
        self.assertNotIn("Traceback", done.stderr)

    def test_the_demo_piped_into_a_reader_that_stops_early_ends_quietly_with_status_0(self) -> None:
        with subprocess.Popen([sys.executable, os.path.join(CODE, "main.py")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT) as demo:
            assert demo.stdout is not None and demo.stderr is not None
            # A one-page pipe: the demo (over 7 KB) cannot all be written before the
            # reader goes, so the demo is still writing when it does.
            fcntl.fcntl(demo.stdout.fileno(), fcntl.F_SETPIPE_SZ, 4096)
            self.assertEqual(os.read(demo.stdout.fileno(), 5), b"Notes")
            demo.stdout.close()  # as `| head -1` does once it has what it wanted
            errors = demo.stderr.read()
            self.assertEqual(demo.wait(timeout=60), 0, errors)
        self.assertEqual(errors, b"")

    def test_the_demo_shows_the_wire_as_indented_json_in_lines_of_at_most_100_characters(self) -> None:
        out = run_demo().stdout
        lines = out.splitlines()
        self.assertEqual([line for line in lines if len(line) > DEMO_WIDTH], [])
        self.assertTrue(any(len(line) == DEMO_WIDTH or "…" in line for line in lines))  # long values were cut, visibly
        self.assertIn('--> {\n      "jsonrpc": "2.0",', out)  # indented, one member a line
        # The state is shown shortened and says so; the whole state never appears.
        self.assertRegex(out, r'"requestState": "v1\.[0-9a-f]{8}\.…\(\d+ chars, signed\)"')
        self.assertIsNone(re.search(r"v1\.[0-9a-f]{8}\.[A-Za-z0-9_-]{40,}", out))

    def test_the_demo_still_shows_discover_the_form_the_accept_and_the_refused_replay_on_a_second_instance(self) -> None:
        out = run_demo().stdout
        steps = re.split(r"^## ", out, flags=re.MULTILINE)[1:]
        titles = [step.splitlines()[0] for step in steps]
        self.assertEqual([title.split(":")[0].split(",")[0] for title in titles],
                         ["1. server/discover", "2. tools/list", "3. tools/call", "The user sees the form",
                          "4. tools/call", "5. tools/call", "Notes left"])
        discover, _, form, shown, accept, replay, _ = steps
        self.assertIn('"supportedVersions": ["2026-07-28"]', discover)
        self.assertIn('"mode": "form"', form)
        self.assertIn("( ) TPS report 2025  [note-14]", shown)
        self.assertIn('"action": "accept"', accept)
        self.assertIn('"deleted": true', accept)
        self.assertIn("second instance sharing the stores", titles[5])
        self.assertIn(f'"error": {{"code": {main.INVALID_PARAMS}, "message": "{main.STATE_INVALID}"}}', replay)
        self.assertIn("refused requestState: confirmation already used", replay)

    def test_wire_lines_cut_only_what_does_not_fit_and_keep_short_containers_on_one_line(self) -> None:
        message = {"a": {"b": [1, 2]}, "long": "x" * 200, "state": "v1.0123abcd." + "s" * 300}
        lines = main.wire_lines(message, 40)
        self.assertEqual(lines[0], "{")
        self.assertEqual(lines[1], '  "a": {"b": [1, 2]},')
        self.assertEqual(len(lines[2]), 40)
        self.assertTrue(lines[2].endswith('x…",'))
        state = main.wire_lines({"state": message["state"]}, 60)
        self.assertEqual(state, ["{", '  "state": "v1.0123abcd.…(312 chars, signed)"', "}"])
        self.assertEqual(main.wire_lines({"a": 1}, 40), ['{"a": 1}'])


def bound_at_top_level(node: ast.stmt) -> set[str]:
    """The module-level names one top-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}


class Uses(ast.NodeVisitor):
    """Names a statement reads, skipping annotations and each function's own local names."""

    def __init__(self) -> None:
        self.found: list[ast.Name] = []
        self.local: list[set[str]] = []

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and not any(node.id in names for names in self.local):
            self.found.append(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        for child in (node.target, node.value):
            if child is not None:
                self.visit(child)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        arguments = node.args
        every = arguments.posonlyargs + arguments.args + arguments.kwonlyargs + [a for a in (arguments.vararg, arguments.kwarg) if a]
        for default in arguments.defaults + [d for d in arguments.kw_defaults if d is not None]:
            self.visit(default)
        for decorator in getattr(node, "decorator_list", []):
            self.visit(decorator)
        body = node.body if isinstance(node.body, list) else [node.body]
        stored = {n.id for part in body for n in ast.walk(part) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        self.local.append({a.arg for a in every} | stored)
        for part in body:
            self.visit(part)
        self.local.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = function


def forward_references(source: str) -> list[str]:
    """Every use, in a top-level statement, of a module-level name first bound further down (annotations aside)."""
    tree = ast.parse(source)
    first: dict[str, int] = {}
    for index, node in enumerate(tree.body):
        for name in bound_at_top_level(node):
            first.setdefault(name, index)
    found = []
    for index, node in enumerate(tree.body):
        uses = Uses()
        uses.visit(node)
        found += [f"line {name.lineno}: {name.id}" for name in uses.found if first.get(name.id, -1) > index]
    return found


def main_source() -> str:
    """The text of code/main.py."""
    with open(os.path.join(CODE, "main.py"), encoding="utf-8") as handle:
        return handle.read()


class ReadingOrder(unittest.TestCase):
    def test_a_name_used_before_its_definition_is_only_the_flow_calling_its_machinery_or_handle_its_frame(self) -> None:
        # Read in call order: the flow (section 7) calls the machinery that protects it
        # (sections 8-10) and handle() (section 11) dispatches to its frame (11-14). Any
        # other use of a name defined further down sends a reader ahead.
        source = main_source()
        starts = [source[: m.start()].count("\n") + 1 for m in re.finditer(r"^# =+ \d+\. ", source, re.MULTILINE)]

        def section(line: int) -> int:
            return sum(1 for start in starts if start <= line)

        tree = ast.parse(source)
        defined = {name: node.lineno for node in tree.body for name in bound_at_top_level(node)}
        allowed = {7: range(8, 11), 11: range(11, 15)}
        for entry in forward_references(source):
            line, name = int(entry.split(":")[0].removeprefix("line ")), entry.split(": ")[1]
            with self.subTest(entry=entry):
                self.assertIn(section(defined[name]), allowed.get(section(line), ()))

    def test_the_forward_reference_finder_sees_a_call_ahead_and_ignores_annotations_and_locals(self) -> None:
        source = (
            "def f(x: Later) -> Later:\n"
            "    y: Later = x\n"
            "    g = lambda later: later\n"
            "    return Later(y), g, [c for c in ()]\n"
            "class Later:\n"
            "    pass\n"
        )
        self.assertEqual(forward_references(source), ["line 4: Later"])
        self.assertEqual(forward_references("class A:\n    pass\ndef f(x: A) -> A:\n    return A()\n"), [])

    def test_the_tools_whole_two_call_flow_is_in_one_class_before_the_files_midpoint(self) -> None:
        source = main_source()
        tree = ast.parse(source)
        (tool,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "NotesDelete"]
        self.assertLess(tool.end_lineno, len(source.splitlines()) / 2)
        methods = {node.name for node in tool.body if isinstance(node, ast.FunctionDef)}
        self.assertEqual(methods, {"__init__", "call", "ask", "delete"})
        called = {ast.unparse(node.func) for node in ast.walk(tool) if isinstance(node, ast.Call)}
        for step in ("read_scope_args", "require_form_elicitation", "authorize", "lookup", "delete_form", "new_state",
                     "self.services.signer.sign", "input_required", "verify_state", "read_answer", "chosen", "consume"):
            self.assertIn(step, called)

    def test_the_first_input_required_result_is_built_in_the_first_half_of_the_file(self) -> None:
        lines = main_source().splitlines()
        first = next(k for k, line in enumerate(lines, start=1) if "return input_required(" in line)
        self.assertLess(first, len(lines) / 2)

    def test_the_errors_and_their_codes_come_before_the_first_section(self) -> None:
        source = main_source()
        first_banner = source.index("# === 1. The two problems")
        for name in ("class ToolError", "class McpError", "INVALID_PARAMS = ", "isError: true"):
            self.assertLess(source.index(name), first_banner, name)


class FileShape(unittest.TestCase):
    def test_main_py_holds_at_most_its_measured_lines_so_product_code_does_not_creep_back_in(self) -> None:
        self.assertLessEqual(len(main_source().splitlines()), MAX_LESSON_LINES)

    def test_main_py_presents_the_lesson_headings_in_order_as_top_level_banners(self) -> None:
        with open(os.path.join(CODE, "main.py"), encoding="utf-8") as handle:
            source = handle.read()
        # A banner is one top-level comment line ruled with "=" (never indented in a class).
        banners = re.findall(r"^# =+ (\d+)\. (.+?) =+$", source, re.MULTILINE)
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
        server.services.notes.candidates = lambda workspace, title: 1 / 0  # type: ignore[method-assign]
        response = server.handle(call(tps()), PRINCIPAL)
        self.assertEqual(response, {"jsonrpc": "2.0", "id": 1, "error": {"code": main.INTERNAL_ERROR, "message": "Internal error"}})
        self.assertTrue(any("ZeroDivisionError" in line for line in server.log))


LIST_IDS = (
    "import sys, unittest\n"
    "def ids(suite):\n"
    "    for test in suite:\n"
    "        yield from ids(test) if isinstance(test, unittest.TestSuite) else [test.id()]\n"
    "print('\\n'.join(sorted(ids(unittest.defaultTestLoader.discover(sys.argv[1])))))\n"
)


def discovered(cwd: str, start: str) -> list[str]:
    """The ids of every test `python3 -m unittest discover START` finds from `cwd`, module prefix dropped."""
    done = subprocess.run([sys.executable, "-c", LIST_IDS, start], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return sorted(line.removeprefix("tests.") for line in done.stdout.splitlines())


class LessonCommands(unittest.TestCase):
    """The commands the lesson types work as typed."""

    def test_the_lessons_cd_code_command_runs_the_checkpoints_in_order_and_main_pys_own_tests_with_only_python_on_path(self) -> None:
        # Only the interpreter's own folder on PATH: no Chromium, PostgreSQL or anything else.
        env = {"PATH": os.path.dirname(sys.executable), "HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8"}
        done = subprocess.run([sys.executable, "-m", "unittest", "discover", "tests", "-v"],
                              capture_output=True, text=True, timeout=120, cwd=CODE, env=env)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        ran = re.findall(r"^(\w+) \((\w+)\.\w+\.\w+\) \.\.\. ok$", done.stderr, re.MULTILINE)
        modules = [module for _, module in ran]
        self.assertEqual(sorted(set(modules)), ["test_checkpoints", "test_lesson"])
        checkpoints = [int(name.split("_")[1]) for name, module in ran if module == "test_checkpoints"]
        self.assertEqual(checkpoints, list(range(1, 12)))
        self.assertEqual(modules[:11], ["test_checkpoints"] * 11)  # the checkpoints first
        self.assertIn(f"Ran {len(ran)} tests", done.stderr)

    def test_the_root_command_runs_the_lessons_tests_among_the_products(self) -> None:
        from_code = discovered(CODE, "tests")
        from_root = discovered(ROOT, ".")
        self.assertGreater(len(from_root), 500)
        self.assertTrue(set(from_code) <= {name.split(".", 1)[0] + "." + name.split(".", 1)[1] for name in from_root})
        self.assertTrue(all(name.startswith(("test_checkpoints.", "test_lesson.")) for name in from_code))


class ProductUsesTheLesson(unittest.TestCase):
    """The product's notes_delete is main.NotesDelete with other stores injected, on every transport."""

    FLOW_STEPS = ("verify_state", "new_state", "read_answer", "delete_form", "require_form_elicitation")

    def test_every_configured_store_serves_the_lessons_own_handler(self) -> None:
        import tempfile

        import assemble
        import config as configuration

        folder = tempfile.mkdtemp(prefix="product-")
        self.addCleanup(__import__("shutil").rmtree, folder, ignore_errors=True)
        notes_dir = os.path.join(folder, "Notes")
        os.makedirs(notes_dir)
        lesson = configuration.lesson_config()
        folders = dict(lesson, db=os.path.join(folder, "nonces.db"))
        folders.pop("notes")
        folders["principals"] = {"alice": {"token": None, "workspaces": [], "notesDirs": [notes_dir]}}
        for name, config in (("memory", lesson), ("sqlite", dict(lesson, db=os.path.join(folder, "notes.db"))), ("folders", folders)):
            with self.subTest(store=name):
                server = assemble.build_server(config, [bytes(range(32))])
                self.addCleanup(assemble.close_store, server.notes)
                tool = server.tools[main.TOOL_NAME]
                # The lesson's class, or the product's subclass that adds the page channel and
                # hands every form request to it: the form, the signing, the claim and the
                # deletion are the lesson's own methods, never a copy.
                self.assertIsInstance(tool, main.NotesDelete)
                for step in ("ask", "delete"):
                    self.assertIs(getattr(type(tool), step), getattr(main.NotesDelete, step))
                self.assertIs(tool.services, server.services)

    def test_no_transport_or_product_module_runs_a_step_of_the_flow_itself(self) -> None:
        # stdio, Streamable HTTP and the 2025-11-25 adapters only route a tools/call to
        # server.handle; the steps of the flow exist once, in main.py.
        for name in ("stdio_transport.py", "streamable_http.py", "legacy.py", "legacy_http.py", "frame.py", "assemble.py", "serve.py"):
            with open(os.path.join(CODE, name), encoding="utf-8") as handle:
                source = handle.read()
            with self.subTest(module=name):
                for step in self.FLOW_STEPS:
                    self.assertNotIn(step + "(", source)


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
