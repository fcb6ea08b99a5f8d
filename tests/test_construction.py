"""Built by construction: the command line and the config resolved once, and nothing set on a part once it is built."""

from __future__ import annotations

import ast
import os
import shutil
import tempfile
import unittest
from collections.abc import Iterator

from helpers import support  # first: it puts code/ on the import path

import config as configuration  # noqa: E402
import serve  # noqa: E402
import settings  # noqa: E402

# The command line and the builder: every part they make gets what it needs in its constructor.
BUILDING = ("serve.py", "launch.py")


def flattened(target: ast.expr) -> Iterator[ast.expr]:
    """The single targets of an assignment target (`a, b.c = ...` is two)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from flattened(element)
    elif isinstance(target, ast.Starred):
        yield from flattened(target.value)
    else:
        yield target


def sets_on_objects(source: str, filename: str) -> list[str]:
    """Each attribute or item set or deleted, as "file function: target", but an object's own attribute in its own
    method.

    `self.x = ...` in a method of the class is the object building itself; `server.log = ...`,
    `args.keeper = ...`, `config["db"] = ...` or `setattr(pages, ...)` set a field on an
    object built elsewhere.
    """
    found: list[str] = []

    def walk(node: ast.AST, function: str, method: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(child, function or child.name, isinstance(node, ast.ClassDef))
                continue
            targets: list[ast.expr] = []
            if isinstance(child, (ast.Assign, ast.Delete)):
                targets = list(child.targets)
            elif isinstance(child, (ast.AugAssign, ast.AnnAssign)):
                targets = [child.target]
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name)
                and child.func.id in ("setattr", "delattr")
            ):
                targets = [child.args[0]] if child.args else []
                targets = [ast.Attribute(value=target, attr="?") for target in targets]
            for target in (single for each in targets for single in flattened(each)):
                own = (
                    method
                    and isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                )
                if isinstance(target, (ast.Attribute, ast.Subscript)) and not own:
                    found.append(f"{filename} {function or '<module>'}: {ast.unparse(target)}")
            walk(child, function, method and not isinstance(child, ast.ClassDef))

    walk(ast.parse(source), "", False)
    return found


def source_of(filename: str) -> str:
    with open(os.path.join(support.CODE, filename), encoding="utf-8") as handle:
        return handle.read()


class NothingIsSetOnABuiltObject(unittest.TestCase):
    """The command line and the builder hand each part what it needs when it is made, never afterwards."""

    def test_the_command_line_and_the_builder_set_no_field_on_an_object_built_elsewhere(self) -> None:
        found = {entry for filename in BUILDING for entry in sets_on_objects(source_of(filename), filename)}
        self.assertEqual(found, set())

    def test_the_confirmation_pages_are_made_over_the_tool_s_links_and_set_nothing_on_it_or_on_themselves(self) -> None:
        found = sets_on_objects(source_of("confirm_pages.py"), "confirm_pages.py")
        self.assertEqual([entry for entry in found if entry.split(" ")[1] in ("install:", "__init__:")], [])

    def test_the_flags_and_the_config_are_merged_in_resolve_and_nowhere_else_in_the_settings(self) -> None:
        found = sets_on_objects(source_of("settings.py"), "settings.py")
        self.assertTrue(found)  # the merge writes the config it takes over: the finder sees those writes
        self.assertEqual([entry for entry in found if not entry.startswith("settings.py resolve: ")], [])

    def test_the_finder_sees_a_field_set_on_a_built_object_but_not_an_object_building_itself(self) -> None:
        source = (
            "class Pages:\n"
            "    def __init__(self, url):\n"
            "        self.url, self.count = url, 0\n"
            "    def bump(self):\n"
            "        self.count += 1\n"
            "def build(config, args):\n"
            "    server = make(config)\n"
            "    server.log = print\n"
            "    args.keeper, sock = None, 1\n"
            "    config['db'] += 'x'\n"
            "    setattr(server, 'pages', None)\n"
            "    del config['notes']\n"
            "    def later(self):\n"
            "        self.pages = None\n"
            "    return server\n"
        )
        self.assertEqual(sets_on_objects(source, "t.py"), [
            "t.py build: server.log", "t.py build: args.keeper", "t.py build: config['db']", "t.py build: server.?",
            "t.py build: config['notes']", "t.py build: self.pages",
        ])  # fmt: skip


class OneResolvedConfiguration(unittest.TestCase):
    """The command line and the config file become one Settings, at start-up, that nothing writes afterwards."""

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="settings-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def resolved(self, *argv: str, config: dict | None = None) -> settings.Settings:
        environ = {"NOTES_MCP_SECRET": support.KEY.hex(), "NOTES_MCP_TOKEN": "t-" + support.KEY.hex()}
        config = configuration.lesson_config() if config is None else config
        return settings.resolve(serve.parser().parse_args(list(argv)), config, environ, self.dir, lambda line: None)

    def test_the_settings_refuse_every_write_to_a_field_and_to_the_store_s_configuration(self) -> None:
        resolved = self.resolved("--stdio")
        with self.assertRaises(AttributeError):
            resolved.publish = True  # type: ignore[misc]
        with self.assertRaises(TypeError):
            resolved.store["db"] = "other.db"  # type: ignore[index]
        self.assertFalse(resolved.publish)
        self.assertNotIn("db", resolved.store)

    def test_a_flag_wins_over_its_config_key_and_the_config_key_serves_without_the_flag(self) -> None:
        config = dict(configuration.lesson_config(), publicUrl="https://a.example", passkeys="off", notesTools=True)
        flags = self.resolved("--http", "--public-url", "https://b.example", "--db", "n.db", config=dict(config))
        self.assertEqual(
            (flags.public_url, flags.notes_tools, flags.db), ("https://b.example", True, os.path.join(self.dir, "n.db"))
        )
        self.assertEqual(flags.relative_db, "n.db")
        keys = self.resolved("--http", config=dict(config))
        self.assertEqual(
            (keys.public_url, keys.notes_tools, keys.db, keys.relative_db), ("https://a.example", True, None, None)
        )
        self.assertEqual(keys.keys, (support.KEY,))
        self.assertEqual(keys.allowed_origins, frozenset({"https://a.example"}))

    def test_a_folder_flag_without_a_config_replaces_the_lesson_fixture_in_the_settings_alone(self) -> None:
        config = configuration.lesson_config()
        resolved = self.resolved("--stdio", "--notes-dir", self.dir, config=config)
        self.assertEqual(resolved.folders, [self.dir])
        self.assertNotIn("notes", resolved.store)
        self.assertTrue(resolved.shares_decisions)
        self.assertFalse(resolved.serves_pages)


if __name__ == "__main__":
    unittest.main()
