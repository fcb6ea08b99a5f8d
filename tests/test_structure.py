"""The house: which module may import which, and what the served server offers by default."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
import unittest
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from helpers import support

SERVER_FILES = sorted(name for name in os.listdir(support.CODE) if name.endswith(".py"))
SCRIPT_FILES = sorted(  # the scripts and the benchmark's package of modes beside them
    os.path.relpath(os.path.join(folder, name), support.CODE)
    for folder, _, names in os.walk(support.SCRIPTS)
    for name in names
    if name.endswith(".py")
)
CODE_FILES = SERVER_FILES + SCRIPT_FILES
OWN = {os.path.basename(name)[:-3] for name in CODE_FILES}

LAYERS = (
    ("main",),  # the lesson
    (
        "confirmations",
        "stores",
        "title_index",
        "change_watch",
        "http_server",
        "sandbox",
        "passkeys",
    ),  # on the lesson only
    (
        "audit",
        "ledger",
        "sqlite_store",
        "postgres_store",
        "folder_paths",
        "folder_index",
        "folder_trash",
        "markdown_store",
        "note_bodies",
        "folder_bodies",
        "text_index",
    ),
    (
        "frame",
        "notes_tools",
        "connect",
        "conformance_fixtures",
        "legacy",
        "legacy_http",
        "stdio_transport",
        "streamable_http",
        "web_pages",
        "browser_confirm",
        "confirm_pages",
        "page_keeper",
        "passkey_pages",
    ),
    ("config", "assemble", "audit_cli", "settings", "launch"),  # a server built from a config
    ("serve", "cli", "__main__"),  # the command line
)
LAYER_OF = {module: depth for depth, modules in enumerate(LAYERS) for module in modules}


@functools.cache
def parsed(path: str) -> ast.Module:
    """The syntax tree of the file at `path`, parsed once while this module runs: its checks read each file again."""
    with open(path, encoding="utf-8") as handle:
        return ast.parse(handle.read())


@functools.cache
def walked(path: str) -> tuple[ast.AST, ...]:
    """Every node of the file at `path` in `ast.walk` order, walked once: a walk costs more than reading a tuple."""
    return tuple(ast.walk(parsed(path)))


def tearDownModule() -> None:
    """Let the trees go once this module's checks are done: kept alive, every later garbage collection of the run
    would walk their hundreds of thousands of nodes again."""
    for cached in (parsed, walked, project_imports):
        cached.cache_clear()


def nodes(filename: str, source: str | None) -> Iterable[ast.AST]:
    """Every node of `source` (a sample), or of the file `filename` of code/ when `source` is None."""
    return walked(os.path.join(support.CODE, filename)) if source is None else ast.walk(ast.parse(source))


@functools.cache
def project_imports(filename: str) -> frozenset[str]:
    """The project modules `filename` imports, at module level or inside a function."""
    found: set[str] = set()
    for node in nodes(filename, None):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])  # `from .cli import run` (the package's __main__) counts too
    return frozenset(found & OWN)


def cycle(graph: Mapping[str, AbstractSet[str]]) -> list[str] | None:
    """One import cycle in `graph`, as the list of modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


class ImportGraph(unittest.TestCase):
    def test_the_code_folder_has_no_import_cycle(self) -> None:
        graph = {os.path.basename(name)[:-3]: project_imports(name) for name in CODE_FILES}
        self.assertIsNone(cycle(graph))

    def test_the_cycle_finder_finds_a_cycle_when_there_is_one(self) -> None:
        self.assertEqual(cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}), ["a", "b", "c", "a"])
        self.assertIsNone(cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}))

    def test_main_py_imports_no_other_module_of_the_project(self) -> None:
        self.assertEqual(project_imports("main.py"), set())

    def test_the_import_graph_figures_in_the_architecture_page_are_the_codes(self) -> None:
        import re

        graph = {name[:-3]: project_imports(name) for name in SERVER_FILES}
        with open(os.path.join(support.ROOT, "docs", "architecture.md"), encoding="utf-8") as handle:
            page = handle.read()
        found = re.search(
            r"(\d+) modules in `code/`, (\d+) imports between them, no cycle.*?(\d+) import it", page, re.S
        )
        assert found is not None
        modules, imports, importers = (int(value) for value in found.groups())
        self.assertEqual(modules, len(graph))
        self.assertEqual(imports, sum(len(deps) for deps in graph.values()))
        self.assertEqual(importers, sum(1 for deps in graph.values() if "main" in deps))

    def test_no_module_imports_one_from_a_layer_above_its_own(self) -> None:
        # docs/architecture.md draws these layers: the lesson, then what builds on it only,
        # the stores and their audit, the served frame with its tools and transports, the
        # assembly of a server from a config, and the command line.
        for name in SERVER_FILES:
            module = name[:-3]
            with self.subTest(module=module):
                self.assertIn(module, LAYER_OF)
                above = {dep for dep in project_imports(name) if LAYER_OF[dep] > LAYER_OF[module]}
                self.assertEqual(above, set())

    def test_no_module_is_named_after_a_standard_library_module(self) -> None:
        self.assertEqual(OWN & set(sys.stdlib_module_names), set())

    def test_no_server_module_imports_a_script(self) -> None:
        scripts = {os.path.basename(name)[:-3] for name in SCRIPT_FILES}
        self.assertIn("bench", scripts)
        for name in SERVER_FILES:
            with self.subTest(module=name):
                self.assertEqual(project_imports(name) & scripts, set())


def foreign_private_attributes(filename: str, source: str | None = None) -> list[str]:
    """Every `x._name` in `filename` where x is not self or cls (NamedTuple's `_replace` aside)."""
    found = []
    for node in nodes(filename, source):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if node.attr in ("_replace", "_exit") or (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            ):
                continue
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


class Encapsulation(unittest.TestCase):
    def test_no_module_outside_tests_touches_another_objects_private_attribute(self) -> None:
        for name in CODE_FILES:
            with self.subTest(module=name):
                self.assertEqual(foreign_private_attributes(name), [])

    def test_the_private_attribute_finder_sees_a_foreign_one(self) -> None:
        self.assertIn("scripts/multihost.py", SCRIPT_FILES)
        with open(os.path.join(support.CODE, "scripts", "multihost.py"), encoding="utf-8") as handle:
            self.assertNotIn("._inside_transaction_hook", handle.read())
        source = "store._hook = 1\nself._own = 2\nnote._replace(a=1)\nx.__doc__\n"
        self.assertEqual(foreign_private_attributes("t.py", source), ["t.py:1: store._hook"])


# What a store is called where the code holds one: a probe of any of these asks a store what
# it can do instead of reading what it declares (stores.Store, stores.Ledger, stores.Texts).
STORE_NAMES = {"store", "notes", "nonces", "ledger", "texts", "database", "replay", "records"}


def store_probes(filename: str, source: str | None = None) -> list[str]:
    """Each hasattr/getattr whose object is named like a store (`store`, `self.notes`, `server.notes`, ...)."""
    found = []
    for node in nodes(filename, source):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("hasattr", "getattr")
            and node.args
        ):
            target = node.args[0]
            name = (
                target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
            )
            if name in STORE_NAMES or "store" in name:
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


class DeclaredCapabilities(unittest.TestCase):
    """A store says what it offers (the interfaces of code/stores.py); nothing asks it with hasattr or getattr."""

    def test_no_module_probes_a_store_with_hasattr_or_getattr(self) -> None:
        self.assertEqual([probe for name in CODE_FILES if name != "main.py" for probe in store_probes(name)], [])

    def test_the_probe_finder_sees_a_probe_of_a_store_but_not_of_a_tool(self) -> None:
        source = (
            "a = hasattr(self.store, 'note_text')\n"
            "b = getattr(server.notes, 'describe', None)\n"
            "c = getattr(nonces, 'write_with')\n"
            "d = getattr(tool, 'review', None)\n"
        )
        self.assertEqual(
            store_probes("t.py", source),
            [
                "t.py:1: hasattr(self.store, 'note_text')",
                "t.py:2: getattr(server.notes, 'describe', None)",
                "t.py:3: getattr(nonces, 'write_with')",
            ],
        )


TESTS = os.path.join(support.ROOT, "tests")


def import_time_skips(filename: str, source: str | None = None) -> list[str]:
    """Every `raise ...SkipTest` a test module runs while it is imported (outside any function or class)."""
    if source is None:
        path = os.path.join(TESTS, filename)
        with open(path, encoding="utf-8") as handle:
            if "SkipTest" not in handle.read():
                return []  # no raise below can name SkipTest: no need to parse the file
        tree = parsed(path)
    else:
        tree = ast.parse(source)
    found = []
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # runs later, at set-up or test time, where a skip is one test's outcome
        if isinstance(node, ast.Raise) and node.exc is not None and "SkipTest" in ast.unparse(node.exc):
            found.append(f"{filename}:{node.lineno}")
        pending.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return sorted(found)


class OptionalPeers(unittest.TestCase):
    """A missing Chromium, PostgreSQL, bwrap or systemd skips a class or a test, never a module at import."""

    def test_no_test_module_raises_skiptest_while_it_is_imported(self) -> None:
        # A module skipped at import becomes a stand-in test named after where discovery
        # started, so the suite from the root and from code/ would no longer agree.
        modules = sorted(name for name in os.listdir(TESTS) if name.endswith(".py"))
        self.assertIn("test_browser.py", modules)
        for name in modules:
            with self.subTest(module=name):
                self.assertEqual(import_time_skips(name), [])

    def test_the_import_time_skip_finder_sees_a_guarded_raise_but_not_one_in_a_function(self) -> None:
        source = (
            "import unittest\n"
            "if not ready():\n"
            "    raise unittest.SkipTest('absent')\n"
            "def setUpModule():\n"
            "    raise unittest.SkipTest('absent')\n"
            "class T(unittest.TestCase):\n"
            "    @classmethod\n"
            "    def setUpClass(cls):\n"
            "        raise unittest.SkipTest('absent')\n"
        )
        self.assertEqual(import_time_skips("t.py", source), ["t.py:3"])


ENTRY_POINTS = {
    ("cli", "run")
}  # pyproject.toml's `notes-mcp = "notes_mcp.cli:run"`: public, though no module imports it


def declared(filename: str) -> set[str] | None:
    """The names a module lists in its `__all__`, or None when it has none."""
    tree = parsed(os.path.join(support.CODE, filename))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def defined(filename: str) -> set[str]:
    """The names a module binds at its top level (definitions, assignments, `from` imports)."""
    tree = parsed(os.path.join(support.CODE, filename))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {leaf.id for target in targets for leaf in ast.walk(target) if isinstance(leaf, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def used_names(filename: str, source: str | None = None) -> set[tuple[str, str, str]]:
    """(module, name, where) for every `from module import name` and `module.name` in `filename` on a project module."""
    walk = tuple(nodes(filename, source))
    me = os.path.basename(filename)[:-3]
    aliases: dict[str, str] = {}  # local name -> project module
    found: set[tuple[str, str, str]] = set()
    for node in walk:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in OWN and "." not in alias.name:
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in OWN:
            found |= {(node.module, alias.name, f"{filename}:{node.lineno}") for alias in node.names}
    for node in walk:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            module = aliases[node.value.id]
            if module != me:
                found.add((module, node.attr, f"{filename}:{node.lineno}"))
    return found


def undeclared(uses: Iterable[tuple[str, str, str]], public: dict[str, set[str] | None]) -> list[str]:
    """Each use of a name its module does not list in `__all__` ("where: module.name"); modules without one are
    skipped."""
    return sorted(
        f"{where}: {module}.{name}" for module, name, where in uses if name not in (public.get(module) or {name})
    )


class PublicNames(unittest.TestCase):
    """Each server module says what the others may use (`__all__`), and the others use only that."""

    def public(self) -> dict[str, set[str] | None]:
        return {name[:-3]: declared(name) for name in SERVER_FILES}

    def test_every_server_module_but_main_declares_its_public_names(self) -> None:
        missing = [name for name, names in self.public().items() if names is None and name != "main"]
        self.assertEqual(missing, [])  # main.py is the lesson's: checked once it declares them

    def test_no_module_uses_a_name_its_module_does_not_declare_public(self) -> None:
        uses = [use for filename in CODE_FILES for use in used_names(filename)]
        self.assertEqual(undeclared(uses, self.public()), [])

    def test_every_declared_name_exists_and_another_module_uses_it(self) -> None:
        used = {(module, name) for filename in CODE_FILES for module, name, _ in used_names(filename)}
        for name, names in self.public().items():
            with self.subTest(module=name):
                self.assertEqual((names or set()) - defined(name + ".py"), set())
                if name != "main":
                    self.assertEqual({n for n in names or () if (name, n) not in used | ENTRY_POINTS}, set())

    def test_the_public_name_check_sees_a_use_of_an_undeclared_name(self) -> None:
        source = (
            "import main, os, stores\nfrom stores import StoreError, "
            "_hidden\nstores.StoreLost\nstores.secret\nos.path\nmain.anything\n"
        )
        uses = used_names("t.py", source)
        found = {(module, name) for module, name, _ in uses}
        self.assertEqual(
            found, {("main", "anything"), *(("stores", n) for n in ("StoreError", "_hidden", "StoreLost", "secret"))}
        )
        public = {"stores": {"StoreError", "StoreLost"}, "main": None}
        self.assertEqual(
            undeclared(uses, public), ["t.py:2: stores._hidden", "t.py:4: stores.secret"]
        )  # main: no __all__ yet


class ServedByDefault(unittest.TestCase):
    """`serve.py --stdio` is the lesson's server unless more is asked for."""

    def test_stdio_without_publish_loads_only_the_lesson_modules_and_opens_no_socket(self) -> None:
        script = (
            "import sys, socket, runpy\n"
            "opened = []\n"
            "real = socket.socket.bind\n"
            "socket.socket.bind = lambda self, *a: (opened.append(a), real(self, *a))[1]\n"
            "sys.argv = ['serve.py', '--stdio']\n"
            "try:\n"
            f"    runpy.run_path({os.path.join(support.CODE, 'serve.py')!r}, run_name='__main__')\n"
            "except SystemExit:\n"
            "    pass\n"
            f"own = sorted(m for m in sys.modules if m in {OWN!r})\n"
            "print(own, opened, file=sys.__stderr__)\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("NOTES_MCP_")}
        env["NOTES_MCP_SECRET"] = support.KEY.hex()
        request = (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":'
            b'{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}\n'
        )
        done = subprocess.run(
            [sys.executable, "-c", script], input=request, capture_output=True, env=env, cwd=support.CODE, timeout=60
        )
        self.assertIn(b'"name":"notes_delete"', done.stdout)
        self.assertNotIn(b"notes_publish", done.stdout)
        self.assertNotIn(b"notes_search", done.stdout)  # the note tools are opt-in (--notes-tools)
        last = done.stderr.decode().strip().splitlines()[-1]
        self.assertNotIn("connect", last)
        self.assertNotIn("notes_tools", last)
        self.assertNotIn("markdown_store", last)  # no folder, no folder store (nor its checks)
        self.assertNotIn("sqlite_store", last)
        self.assertTrue(last.endswith("[]"), last)  # no socket was bound
