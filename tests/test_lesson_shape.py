"""The lesson as a learner meets it: the demo, the file's section order, the shipped skill."""

from __future__ import annotations

import ast
import fcntl
import functools
import os
import re
import subprocess
import sys
import unittest

from helpers.support import CODE, PRINCIPAL, ROOT, call, logged, make_server, tps

import main

# The lesson's headings, in the lesson's order, with the tool's flow assembled right after
# the machinery it calls: the banners of code/main.py.
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
    "The two-call flow, in one place: notes_delete",
    "The protocol frame: handle() and the JSON-RPC envelope",
    "The protocol frame: server/discover",
    "The protocol frame: tools/list",
    "The protocol frame: tools/call",
    "The demo",
]


MAX_LESSON_LINES = 1237  # main.py as `ruff format` writes it, every check kept (docs/architecture.md says why)
MAX_DEMO_LINES = 120  # the demo's exchanges as indented JSON, the form, a decline and the notes left
DEMO_WIDTH = 100  # characters in one line of the demo
FIRST_CALL_BY_LINE = 50  # the first tools/call is on the first screenful


@functools.cache
def run_demo() -> subprocess.CompletedProcess[str]:
    """`python3 code/main.py`, as a learner runs it from the root: run once, its output read by every test that asks."""
    return subprocess.run(
        [sys.executable, os.path.join(CODE, "main.py")], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


class Demo(unittest.TestCase):
    def test_the_demo_prints_the_two_call_flow_a_decline_and_the_notes_left_in_at_most_120_lines(self) -> None:
        done = run_demo()
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = done.stdout.splitlines()
        self.assertLessEqual(len(lines), MAX_DEMO_LINES)
        self.assertGreater(len(lines), MAX_DEMO_LINES // 2)  # the bound holds the demo, not an empty one
        out = done.stdout
        for expected in (
            '"method": "server/discover"',
            '"method": "tools/list"',
            '"resultType": "input_required"',
            '"id": 2,',
            '"structuredContent": {"deleted": true, "noteId": "note-14"}',
            "Notes left",
        ):
            self.assertIn(expected, out)
        left = out.split("Notes left", 1)[1]
        self.assertNotIn("note-14", left)
        for kept in ("note-3", "note-7", "note-99", "evil-1", "tmp-1"):
            self.assertIn(kept, left)
        self.assertNotIn("Traceback", done.stderr)

    def test_the_first_tools_call_is_within_the_demos_first_50_lines(self) -> None:
        lines = run_demo().stdout.splitlines()
        first = next(k for k, line in enumerate(lines, start=1) if '"method": "tools/call"' in line)
        self.assertLessEqual(first, FIRST_CALL_BY_LINE)
        self.assertTrue(any('"method": "tools/list"' in line for line in lines[:first]))  # discovery came first

    def test_the_demo_piped_into_a_reader_that_stops_early_ends_quietly_with_status_0(self) -> None:
        with subprocess.Popen(
            [sys.executable, os.path.join(CODE, "main.py")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
        ) as demo:
            assert demo.stdout is not None and demo.stderr is not None
            # A one-page pipe: the demo (over 4 KB) cannot all be written before the
            # reader goes, so the demo is still writing when it does.
            fcntl.fcntl(demo.stdout.fileno(), fcntl.F_SETPIPE_SZ, 4096)
            self.assertEqual(os.read(demo.stdout.fileno(), 5), b"Notes")
            demo.stdout.close()  # as `| head -1` does once it has what it wanted
            errors = demo.stderr.read()
            self.assertEqual(demo.wait(timeout=60), 0, errors)
        self.assertEqual(errors, b"")
        self.assertGreater(len(run_demo().stdout.encode()), 4096)  # more than the pipe above holds

    def test_the_demo_shows_the_wire_as_indented_json_in_lines_of_at_most_100_characters(self) -> None:
        out = run_demo().stdout
        lines = out.splitlines()
        self.assertEqual([line for line in lines if len(line) > DEMO_WIDTH], [])
        self.assertTrue(any(len(line) == DEMO_WIDTH or "…" in line for line in lines))  # long values were cut, visibly
        self.assertIn('--> {"jsonrpc": "2.0", "id": 0, "method": "server/discover",\n      "params": {', out)
        # The state is shown shortened and says so; the whole state never appears.
        self.assertRegex(out, r'"requestState": "v1\.[0-9a-f]{8}\.…\(\d+ chars, signed\)"')
        self.assertIsNone(re.search(r"v1\.[0-9a-f]{8}\.[A-Za-z0-9_-]{40,}", out))

    def test_the_demo_shows_discover_the_form_the_accept_the_refused_replay_on_a_second_instance_and_a_decline(
        self,
    ) -> None:
        out = run_demo().stdout
        steps = re.split(r"^## ", out, flags=re.MULTILINE)[1:]
        titles = [step.splitlines()[0] for step in steps]
        self.assertEqual(
            [title.split(":")[0].split(",")[0].split(" (")[0] for title in titles],
            [
                "1. server/discover",
                "2. tools/list",
                "3. tools/call",
                "The user sees the form",
                "4. tools/call",
                "5. tools/call",
                "6. tools/call",
                "Notes left",
            ],
        )
        discover, listed, form, shown, accept, replay, decline, _ = steps
        self.assertIn('"supportedVersions": ["2026-07-28"]', discover)
        self.assertIn('"mode": "form"', form)
        self.assertIn("( ) TPS report 2023  [note-3]", shown)
        self.assertIn("(x) TPS report 2025  [note-14]", shown)
        self.assertIn('"action": "accept"', accept)
        self.assertIn('"deleted": true', accept)
        self.assertIn("second instance sharing the stores", titles[5])
        self.assertIn(f'"error": {{"code": {main.INVALID_PARAMS}, "message": "{main.STATE_INVALID}"}}', replay)
        self.assertIn("refused requestState: confirmation already used", replay)
        self.assertIn('"inputResponses": {"delete_choice": {"action": "decline"}}', decline)
        self.assertIn('"structuredContent": {"deleted": false, "reason": "declined"}', decline)

    def test_tools_list_is_shown_as_the_tools_name_and_scope_schema_with_a_line_naming_what_is_left_out(self) -> None:
        listed = re.split(r"^## ", run_demo().stdout, flags=re.MULTILINE)[2]
        self.assertIn('"name": "notes_delete"', listed)
        self.assertIn('"workspaceUri": {"type": "string", "format": "uri", "maxLength": 2048}', listed)
        self.assertIn(f'"title": {{"type": "string", "minLength": 1, "maxLength": {main.MAX_TITLE_LENGTH}}}', listed)
        self.assertIn('"required": ["workspaceUri", "title"]', listed)
        for omitted in ("outputSchema", "annotations", "description"):
            with self.subTest(omitted=omitted):
                self.assertNotIn(f'"{omitted}"', listed)
                self.assertIn(
                    omitted, listed.splitlines()[-2] + listed.splitlines()[-1]
                )  # named on the "left out" line
        self.assertIn("left out here", listed)

    def test_each_demo_step_names_the_sections_of_main_py_that_produce_it(self) -> None:
        titles = re.findall(r"^## (.+)$", run_demo().stdout, flags=re.MULTILINE)
        cited = set()
        for title in titles:
            with self.subTest(title=title):
                numbers = re.search(r"\(sections? ([\d, ]+)", title)
                if numbers is None:
                    self.fail(f"no section numbers in {title!r}")
                cited |= {int(n) for n in numbers.group(1).replace(",", " ").split()}
        self.assertEqual(cited | {15}, set(range(1, len(SECTIONS) + 1)))  # every heading but the demo's own appears

    def test_wire_lines_cut_only_what_does_not_fit_and_share_lines_between_members_that_fit(self) -> None:
        message = {"a": {"b": [1, 2]}, "long": "x" * 200, "state": "v1.0123abcd." + "s" * 300}
        lines = main.wire_lines(message, 50)
        self.assertEqual(lines[0], '{"a": {"b": [1, 2]},')  # the envelope's first member shares its brace's line
        self.assertEqual(len(lines[1]), 50)
        self.assertTrue(lines[1].endswith('x…",'))
        self.assertEqual(
            lines[2], '  "state": "v1.0123abcd.…(312 chars, signed)"}'
        )  # closing brackets end the last line
        self.assertEqual(main.wire_lines({"a": 1}, 40), ['{"a": 1}'])
        packed = main.wire_lines({"jsonrpc": "2.0", "id": 3, "result": {"x": "y" * 20, "n": 1, "m": 2}}, 40)
        self.assertEqual(
            packed,
            ['{"jsonrpc": "2.0", "id": 3,', '  "result": {', '    "x": "' + "y" * 20 + '", "n": 1,', '    "m": 2}}'],
        )  # members that fit share a line; closers end the last
        self.assertTrue(all(len(line) <= 40 for line in packed) and all(len(line) <= 50 for line in lines))


# Reading in one direction: every name main.py uses, and every member it reaches through an
# attribute, is defined on a line above the use. How a use is resolved:
#   - a name: a module-level binding (def, class, assignment, import), unless a local of the
#     function it sits in (parameters, assignments, comprehension variables) shadows it;
#     annotations count, and a string in an annotation or a subscript ("Server") is read as
#     the name it spells;
#   - `x.attr`: the type of `x` is worked out from what the code writes down: `self` in a
#     method is its class; a parameter or local annotated with one of the file's classes
#     (also `X | None`); a call of a class, or of a function or method whose return
#     annotation names one; an attribute whose class annotates it, or `self.a = param` with
#     an annotated param. The member (method, property, class-level name, NamedTuple field,
#     or `self.a` first set in a method) must be defined above the use, base classes
#     included. When the type is unknown, `.attr` resolves only if exactly one of the file's
#     classes has such a member and no builtin value (dict, str, list, ...) does; another
#     module's names (`json.dumps`) are not this file's.

# Attributes that builtin values carry (dict.get, list.append, str.split, ...): an attribute
# whose receiver's type is unknown resolves to a member of this file only when no builtin
# value could answer it.
BUILTIN_ATTRIBUTES = {
    name for kind in (dict, list, str, tuple, set, bytes, int, float, object, BaseException, type) for name in dir(kind)
}


def bound_at_top_level(node: ast.stmt) -> set[str]:
    """The module-level names one top-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}


class ClassInfo:
    """One top-level class: where each member is first defined, and the member's type where it is written down."""

    def __init__(self, node: ast.ClassDef) -> None:
        self.name, self.line = node.name, node.lineno
        self.bases = [base.id for base in node.bases if isinstance(base, ast.Name)]
        self.members: dict[str, int] = {}
        self.types: dict[str, ast.expr | None] = {}  # attribute -> annotation; a method -> its return annotation
        self.properties: set[str] = set()


def annotation_class(annotation: ast.expr | None, classes: dict[str, ClassInfo]) -> str | None:
    """The file's class an annotation names: `X`, `X | None`, `"X"`; containers (list[X]) name none."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.Name):
        return annotation.id if annotation.id in classes else None
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return annotation_class(annotation.left, classes) or annotation_class(annotation.right, classes)
    return None


class Reader(ast.NodeVisitor):
    """Walks one top-level statement as a reader meets it, noting each use that reaches below itself."""

    def __init__(
        self,
        defined: dict[str, int],
        classes: dict[str, ClassInfo],
        returns: dict[str, str | None],
        modules: set[str],
        found: list[str],
    ) -> None:
        self.defined, self.classes, self.returns, self.modules, self.found = defined, classes, returns, modules, found
        self.scopes: list[dict[str, str | None]] = []  # local name -> the file's class it holds (or None)
        self.owner: list[str] = []  # the class whose methods are being read (for `self`)

    # -- what a name or an expression holds ------------------------------------------------
    def local(self, name: str) -> tuple[bool, str | None]:
        for scope in reversed(self.scopes):
            if name in scope:
                return True, scope[name]
        return False, None

    def member(self, cls: str, attr: str) -> tuple[str, int, ast.expr | None, bool] | None:
        info = self.classes.get(cls)
        while info is not None:
            if attr in info.members:
                return info.name, info.members[attr], info.types.get(attr), attr in info.properties
            info = next((self.classes[b] for b in info.bases if b in self.classes), None)
        return None

    def type_of(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            is_local, held = self.local(node.id)
            if is_local:
                return held
            return node.id if node.id in self.classes else None
        if isinstance(node, ast.Attribute):
            owner = self.type_of(node.value)
            found = self.member(owner, node.attr) if owner else None
            return annotation_class(found[2], self.classes) if found else None
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                if node.func.id in self.classes and not self.local(node.func.id)[0]:
                    return node.func.id
                return self.returns.get(node.func.id)
            if isinstance(node.func, ast.Attribute):
                owner = self.type_of(node.func.value)
                found = self.member(owner, node.func.attr) if owner else None
                return annotation_class(found[2], self.classes) if found else None
        return None

    # -- uses -------------------------------------------------------------------------------
    def use(self, name: str, line: int) -> None:
        if self.local(name)[0] or name not in self.defined:
            return
        if self.defined[name] > line:
            self.found.append(f"line {line}: {name} (defined at line {self.defined[name]})")

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.use(node.id, node.lineno)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.visit(node.value)
        if isinstance(node.value, ast.Name) and node.value.id in self.modules and not self.local(node.value.id)[0]:
            return  # json.dumps, sys.stderr: another module's name
        owner = self.type_of(node.value)
        if owner is not None:
            found = self.member(owner, node.attr)
        else:  # an untyped receiver: a member only this file's classes have, named by exactly one of them
            if node.attr in BUILTIN_ATTRIBUTES:
                return
            having = [h for h in (self.member(cls, node.attr) for cls in self.classes) if h is not None]
            found = having[0] if len({h[0] for h in having}) == 1 else None
        if found is not None and found[1] > node.lineno and isinstance(node.ctx, ast.Load):
            self.found.append(f"line {node.lineno}: .{node.attr} ({found[0]}.{node.attr}, defined at line {found[1]})")

    def annotation(self, node: ast.expr | None) -> None:
        """An annotation is read like code; a string in it (a forward reference) is read as the expression it spells."""
        if node is None:
            return
        for part in ast.walk(node):
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                try:
                    inner = ast.parse(part.value, mode="eval").body
                except SyntaxError:
                    continue
                for name in ast.walk(inner):
                    if isinstance(name, ast.Name):
                        self.use(name.id, part.lineno)
            elif isinstance(part, ast.Name):
                self.use(part.id, part.lineno)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        # Type expressions outside annotations (an alias such as Callable[["Server", ...], ...]):
        # a string naming a top-level name is a forward reference.
        self.visit(node.value)
        for part in ast.walk(node.slice):
            if isinstance(part, ast.Constant) and isinstance(part.value, str) and part.value.isidentifier():
                self.use(part.value, part.lineno)
        self.visit(node.slice)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)
        if isinstance(node.target, ast.Name) and self.scopes:
            self.scopes[-1][node.target.id] = annotation_class(node.annotation, self.classes)
        else:
            self.visit(node.target)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name) and self.scopes:
                self.scopes[-1][target.id] = self.type_of(node.value)
            else:
                self.visit(target)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for part in node.bases + node.keywords + node.decorator_list:
            self.visit(part)
        self.owner.append(node.name)
        for statement in node.body:
            self.visit(statement)
        self.owner.pop()

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        arguments = node.args
        every = (
            arguments.posonlyargs
            + arguments.args
            + arguments.kwonlyargs
            + [a for a in (arguments.vararg, arguments.kwarg) if a]
        )
        for default in arguments.defaults + [d for d in arguments.kw_defaults if d is not None]:
            self.visit(default)
        if not isinstance(node, ast.Lambda):
            for decorator in node.decorator_list:
                self.visit(decorator)
            for argument in every:
                self.annotation(argument.annotation)
            self.annotation(node.returns)
        scope: dict[str, str | None] = {
            a.arg: annotation_class(getattr(a, "annotation", None), self.classes) for a in every
        }
        if (
            every
            and self.owner
            and not isinstance(node, ast.Lambda)
            and every[0].arg in ("self", "cls")
            and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        ):
            scope[every[0].arg] = self.owner[-1]
        body = node.body if isinstance(node.body, list) else [node.body]
        # Names the body binds are its own (unknown type until assigned).
        for part in body:
            for n in ast.walk(part):
                if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                    scope.setdefault(n.id, None)
                elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                    scope.setdefault(n.name, None)
        self.scopes.append(scope)
        for part in body:
            self.visit(part)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = function

    def comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        scope: dict[str, str | None] = {
            n.id: None for gen in node.generators for n in ast.walk(gen.target) if isinstance(n, ast.Name)
        }
        self.scopes.append(scope)
        self.generic_visit(node)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = comprehension


def classes_of(tree: ast.Module) -> dict[str, ClassInfo]:
    """Every top-level class with its members: methods, class-level names and `self.x` set in a method."""
    classes = {node.name: ClassInfo(node) for node in tree.body if isinstance(node, ast.ClassDef)}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        info = classes[node.name]
        statement: ast.AST  # a class body's statements, then any node of its methods
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info.members.setdefault(statement.name, statement.lineno)
                info.types[statement.name] = statement.returns
                if any(isinstance(d, ast.Name) and d.id == "property" for d in statement.decorator_list):
                    info.properties.add(statement.name)
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                info.members.setdefault(statement.target.id, statement.lineno)
                info.types[statement.target.id] = statement.annotation
            elif isinstance(statement, ast.Assign):
                for target in statement.targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            info.members.setdefault(name.id, statement.lineno)
        for method in (s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))):
            params = {a.arg: a.annotation for a in method.args.args + method.args.kwonlyargs}
            for statement in ast.walk(method):
                pairs: list[tuple[ast.expr, ast.expr | None, ast.expr | None]] = []
                if isinstance(statement, ast.AnnAssign):
                    pairs.append((statement.target, statement.annotation, statement.value))
                elif isinstance(statement, ast.Assign):
                    for target in statement.targets:
                        if isinstance(target, ast.Tuple) and isinstance(statement.value, ast.Tuple):
                            pairs += [
                                (t, None, v) for t, v in zip(target.elts, statement.value.elts, strict=False)
                            ]  # a starred target takes several
                        elif isinstance(target, ast.Tuple):
                            pairs += [(t, None, None) for t in target.elts]
                        else:
                            pairs.append((target, None, statement.value))
                for target, annotation, value in pairs:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        line = statement.lineno if isinstance(statement, ast.stmt) else target.lineno  # an assignment's
                        info.members.setdefault(target.attr, line)
                        if annotation is None and isinstance(value, ast.Name):
                            annotation = params.get(value.id)
                        if (
                            annotation is None
                            and isinstance(value, ast.Attribute)
                            and isinstance(value.value, ast.Name)
                        ):
                            owner = annotation_class(params.get(value.value.id), classes)
                            if owner is not None:
                                annotation = classes[owner].types.get(value.attr)
                        info.types.setdefault(target.attr, annotation)
    return classes


def downward_uses(source: str) -> list[str]:
    """Each use of a top-level name, or of a class member through an attribute, on a line above its definition."""
    tree = ast.parse(source)
    defined: dict[str, int] = {}
    for node in tree.body:
        for name in bound_at_top_level(node):
            defined.setdefault(name, node.lineno)
    modules = {
        name
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for name in bound_at_top_level(node)
    }
    classes = classes_of(tree)
    returns = {
        node.name: annotation_class(node.returns, classes)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    found: list[str] = []
    for node in tree.body:
        Reader(defined, classes, returns, modules, found).visit(node)
    return found


def main_source() -> str:
    """The text of code/main.py."""
    with open(os.path.join(CODE, "main.py"), encoding="utf-8") as handle:
        return handle.read()


def section_starts(source: str) -> dict[int, int]:
    """Section number -> the line of its banner."""
    return {
        int(m.group(1)): source[: m.start()].count("\n") + 1
        for m in re.finditer(r"^# =+ (\d+)\. ", source, re.MULTILINE)
    }


class ReadingOrder(unittest.TestCase):
    def test_no_name_or_member_main_py_uses_is_defined_below_the_use(self) -> None:
        self.assertEqual(downward_uses(main_source()), [])

    def test_the_finder_sees_names_annotations_forward_strings_and_members_reached_through_attributes(self) -> None:
        source = (
            "import json\n"
            "def f(x: Later, store: Store) -> Later:\n"  # 2: Later (annotation) ahead
            "    y: Later = x\n"  # 3: Later (annotation) ahead
            "    g = lambda later: later\n"
            "    store.find(json.dumps(y))\n"  # 5: Store.find, defined at 15, ahead
            "    return Later(y), g, [c for c in ()], {}.get(1)\n"  # 6: Later ahead; dict.get is not this file's
            "Alias = dict[str, 'Later']\n"  # 7: a forward string in a subscript
            "class Later:\n"
            "    def use(self) -> None:\n"
            "        self.helper()\n"  # 10: Later.helper, defined at 11, ahead
            "    def helper(self) -> Later:\n"  # 11: its own class, above: fine
            "        return self.unique_member\n"  # 12: unique_member ahead (set in a later method)
            "    def later(self) -> None:\n"
            "        self.unique_member = 1\n"
            "class Store:\n"
            "    def find(self, text: str) -> None:\n"
            "        pass\n"
        )
        found = [entry.split(" (")[0] for entry in downward_uses(source)]
        self.assertEqual(
            found,
            [
                "line 2: Later",
                "line 2: Store",
                "line 2: Later",
                "line 3: Later",
                "line 5: .find",
                "line 6: Later",
                "line 7: Later",
                "line 10: .helper",
                "line 12: .unique_member",
            ],
        )
        self.assertEqual(
            downward_uses("class A:\n    def m(self) -> A:\n        return A()\ndef f(x: A) -> A:\n    return x.m()\n"),
            [],
        )

    def test_the_two_call_flow_is_one_class_right_after_the_machinery_it_calls(self) -> None:
        source = main_source()
        tree = ast.parse(source)
        (tool,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "NotesDelete"]
        starts = section_starts(source)
        self.assertTrue(starts[10] < tool.lineno < starts[11])  # the flow's own section
        machinery = {node.name: node.lineno for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        for name, section in (
            ("StateSigner", 7),
            ("new_state", 8),
            ("verify_state", 8),
            ("MemoryReplayStore", 8),
            ("consume", 9),
        ):
            with self.subTest(name=name):
                self.assertTrue(starts[section] < machinery[name] < starts[section + 1])
        methods = [node.name for node in tool.body if isinstance(node, ast.FunctionDef)]
        self.assertEqual(methods, ["__init__", "ask", "delete", "call"])  # each step above the method that calls it
        called = {ast.unparse(node.func) for node in ast.walk(tool) if isinstance(node, ast.Call)}
        for step in (
            "read_scope_args",
            "require_form_elicitation",
            "authorize",
            "lookup",
            "delete_form",
            "new_state",
            "self.services.signer.sign",
            "input_required",
            "verify_state",
            "read_answer",
            "chosen",
            "consume",
        ):
            self.assertIn(step, called)

    def test_the_first_input_required_result_is_built_in_the_flow_after_signing_and_the_replay_store(self) -> None:
        source = main_source()
        lines = source.splitlines()
        first = next(k for k, line in enumerate(lines, start=1) if "return input_required(" in line)
        starts = section_starts(source)
        self.assertTrue(starts[10] < first < starts[11])
        for defined in ("def new_state(", "def verify_state(", "class MemoryReplayStore", "def consume("):
            self.assertLess(
                next(k for k, line in enumerate(lines, start=1) if line.startswith(defined)), first, defined
            )

    def test_the_notes_store_is_defined_where_notes_are_first_needed_and_the_frames_helpers_before_server(self) -> None:
        tree = ast.parse(main_source())
        order = [name for node in tree.body for name in sorted(bound_at_top_level(node))]
        # lookup, the first code that reads notes from a store, comes right after the store it reads
        self.assertEqual(order[order.index("MemoryNotesStore") + 1], "lookup")
        self.assertLess(
            order.index("inside_workspace"), order.index("MemoryNotesStore")
        )  # the store's containment check
        for helper in ("Envelope", "read_id", "parse_envelope", "error_response"):
            self.assertLess(order.index(helper), order.index("Server"), helper)
        # The one dispatch table, entered by each handler's section below Server.
        self.assertEqual(
            main.Server.METHODS,
            {"server/discover": main.discover, "tools/list": main.list_tools, "tools/call": main.call_tool},
        )
        self.assertEqual(main.lesson_server(bytes(32)).methods, main.Server.METHODS)

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
        server.services.notes.candidates = lambda workspace, title: 1 / 0  # type: ignore[method-assign, assignment, return-value]  # fails on purpose
        response = server.handle(call(tps()), PRINCIPAL)
        self.assertEqual(
            response, {"jsonrpc": "2.0", "id": 1, "error": {"code": main.INTERNAL_ERROR, "message": "Internal error"}}
        )
        self.assertTrue(any("ZeroDivisionError" in line for line in logged(server)))


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


def discovered_from_root() -> list[str]:
    """The ids of every test `python3 -m unittest discover` finds from the root, module prefix dropped.

    Found in this process, as `discover` finds them (the suite from the root runs in this
    package): a second Python would import every test module again for the same list.
    """

    def ids(suite: unittest.TestSuite) -> list[str]:
        return [i for test in suite for i in (ids(test) if isinstance(test, unittest.TestSuite) else [test.id()])]

    return sorted(name.removeprefix("tests.") for name in ids(unittest.TestLoader().discover(ROOT, top_level_dir=ROOT)))


class LessonCommands(unittest.TestCase):
    """The commands the lesson types work as typed."""

    def test_the_lessons_cd_code_command_runs_the_checkpoints_in_order_and_main_pys_own_tests_with_only_python_on_path(
        self,
    ) -> None:
        # Only the interpreter's own folder on PATH: no Chromium, PostgreSQL or anything else.
        env = {"PATH": os.path.dirname(sys.executable), "HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8"}
        done = subprocess.run(
            [sys.executable, "-m", "unittest", "discover", "tests", "-v"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=CODE,
            env=env,
        )
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
        from_root = discovered_from_root()
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
        for name, config in (
            ("memory", lesson),
            ("sqlite", dict(lesson, db=os.path.join(folder, "notes.db"))),
            ("folders", folders),
        ):
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
        for name in (
            "stdio_transport.py",
            "streamable_http.py",
            "legacy.py",
            "legacy_http.py",
            "frame.py",
            "assemble.py",
            "serve.py",
        ):
            with open(os.path.join(CODE, name), encoding="utf-8") as handle:
                source = handle.read()
            with self.subTest(module=name):
                for step in self.FLOW_STEPS:
                    self.assertNotIn(step + "(", source)


class ShippedSkill(unittest.TestCase):
    def test_the_skill_covers_scope_authorization_mrtr_branches_binding_and_its_refusals(self) -> None:
        with open(os.path.join(ROOT, "outputs", "skill-elicitation-form-designer.md"), encoding="utf-8") as handle:
            text = handle.read().lower()
        for topic in (
            "workspaceuri",
            "authoriz",
            "containment",
            "input_required",
            "requeststate",
            "accept",
            "decline",
            "cancel",
            "nonce",
            "expiry",
            "roots",
            "sandbox",
            "url mode",
            "password",
        ):
            with self.subTest(topic=topic):
                self.assertIn(topic, text)


if __name__ == "__main__":
    unittest.main()
