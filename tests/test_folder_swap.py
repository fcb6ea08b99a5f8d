"""A notes folder swapped after start-up: every tool and every operator command refuses, and the folder reached is left
byte for byte.

alice may rename her notes folder's parent's entries: she moves her folder away and puts a
link at its path, to bob's folder or to a folder no principal is granted. The server opened
each folder once, at start-up (folder_paths.Root); everything after goes through
folder_paths.open_below, which checks the root first. The matrix (tool x target x sandbox)
is in docs/security.md.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import sqlite3
import stat
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple
from unittest import mock

from helpers import operator_command, procs
from helpers.support import KEY, Clock, Log

import audit
import folder_paths
import frame
import main
import markdown_store
import notes_tools
import sandbox
import sqlite_store
from test_notes_tools import accept, tools_call

BOB_TOKEN = "bob-token-0123456789abcdef"
CAROL_TOKEN = "carol-token-0123456789abcdef"
OLD_TRASH = "19700101T000000Z-0123456789ab-expired.md"  # a trashed file long past any retention
TARGETS = ("bob", "outside")
SWAPPER = {"bob": ("alice", procs.TOKEN), "outside": ("carol", CAROL_TOKEN)}  # who links her folder to each target


def audit_command(config: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`serve.py audit --config CONFIG ARGS...` as the operator runs it: a store of its own, its folders opened afresh.

    It runs in this process (test_audit.OperatorCommand runs the command as a process).
    """
    return operator_command.run(["audit", "--config", config, *args], env)


def audit_rows(db: str, columns: str) -> list[tuple[Any, ...]]:
    """The audit table's `columns` in entry order, read behind the server's back."""
    conn = sqlite3.connect(db, timeout=procs.GUARD)
    try:
        return conn.execute(f"SELECT {columns} FROM audit ORDER BY id").fetchall()
    finally:
        conn.close()


def tree(folder: str) -> dict[str, tuple[int, bytes | None]]:
    """Every entry below `folder` (hidden ones and the trash included): its mode and, for a file, its bytes."""
    found: dict[str, tuple[int, bytes | None]] = {}
    for where, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(where, name)
            info = os.lstat(path)
            data = None
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    data = handle.read()
            found[os.path.relpath(path, folder)] = (info.st_mode, data)
    return found


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def folder_uri(path: str) -> str:
    return main.format_file_uri(tuple(p for p in path.split("/") if p))


class Folders:
    """alice's, bob's and an outside folder under one temporary folder; each target holds notes and an expired trashed
    file. carol's folder holds notes like alice's."""

    def __init__(self, test: Any) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="md-swap-")
        test.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.alice, self.bob, self.outside = (os.path.join(self.dir, name) for name in ("alice", "bob", "outside"))
        for path, text in (
            *((f"{who}/tps.md", "# TPS alice\n") for who in ("alice", "carol")),
            *((f"{who}/old.md", "# TPS alice old\n") for who in ("alice", "carol")),
            *((f"{who}/plan.md", "# Plan alice\nfirst\n") for who in ("alice", "carol")),
            ("bob/tps.md", "# TPS bob secret\n"),
            ("bob/plan.md", "# Plan bob\nsecret\n"),
            ("bob/2025/plan.md", "# TPS bob plan\n"),
            ("outside/tps.md", "# TPS outside\n"),
            ("outside/plan.md", "# Plan outside\nsecret\n"),
            ("bob/.trash/" + OLD_TRASH, "bob's trashed\n"),
            ("outside/.trash/" + OLD_TRASH, "outside trashed\n"),
        ):
            write(os.path.join(self.dir, path), text)
        os.chmod(os.path.join(self.bob, "plan.md"), 0o600)
        self.alice_uri = folder_uri(self.alice)

    def target(self, name: str) -> str:
        return self.bob if name == "bob" else self.outside

    def swap(self, target: str, who: str = "alice") -> None:
        """`who`'s folder renamed away, a link to `target` at its path."""
        folder = os.path.join(self.dir, who)
        os.rename(folder, folder + "-old")
        os.symlink(target, folder)

    def unswap(self, who: str) -> None:
        """`who`'s folder back at its path, the link gone."""
        folder = os.path.join(self.dir, who)
        os.unlink(folder)
        os.rename(folder + "-old", folder)


class Served(NamedTuple):
    """A server over one set of folders, and what the operator's command needs to open the same store."""

    folders: Folders
    db: str
    config: str
    env: dict[str, str]
    server: procs.HttpServer


class SwapContract(unittest.TestCase):
    """Every note tool and operator command after a swap, against a real server, sandbox on and off.

    One server per sandbox setting for the class: in its folders alice links hers to bob's and
    carol links hers to the outside one, each in her own test, which puts her folder back when
    it ends. A server a test left dead is replaced, with new folders.
    """

    matrix: dict[tuple[str, str, str], str] = {}
    served: dict[bool, Served] = {}

    @classmethod
    def serve(cls, confined: bool) -> Served:
        """New folders and a server over them for alice, bob and carol, cleaned up with the class."""
        scope = procs.ClassScope(cls)
        folders = Folders(scope)
        db = os.path.join(folders.dir, "nonces.db")
        config = procs.write_config(
            scope,  # type: ignore[arg-type]
            {
                "principals": {
                    "alice": {"token": procs.TOKEN, "workspaces": [], "notesDirs": [folders.alice]},
                    "bob": {"token": BOB_TOKEN, "workspaces": [], "notesDirs": [folders.bob]},
                    "carol": {
                        "token": CAROL_TOKEN,
                        "workspaces": [],
                        "notesDirs": [os.path.join(folders.dir, "carol")],
                    },
                },
                "stdioPrincipal": "alice",
                "db": db,
                "notesTools": True,
            },
        )
        env = procs.server_env(NOTES_MCP_SECRET=procs.SECRET, XDG_STATE_HOME=os.path.join(folders.dir, "state"))
        server = procs.HttpServer(scope, "--config", config, *(() if confined else ("--no-sandbox",)), env=env)
        if not cls.served:
            cls.addClassCleanup(cls.served.clear)
        return Served(folders, db, config, env, server)

    def start(self, confined: bool) -> None:
        if confined and isinstance(sandbox.kernel_abi(), str):
            self.skipTest(f"Landlock {sandbox.kernel_abi()}")
        cls = type(self)
        served = cls.served.get(confined)
        if served is None or served.server.proc.poll() is not None:
            served = cls.served[confined] = cls.serve(confined)
        self.folders, self.db, self.config, self.env, self.server = served
        self.assertTrue(self.server.wait_for_line("sandbox: "), self.server.stderr_text())
        said = next(line for line in self.server.stderr_lines if "sandbox: " in line)
        self.assertTrue(said.startswith("notes-mcp: sandbox: on" if confined else "notes-mcp: sandbox: off"), said)
        self.conn = self.server.connect(self)

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        _, _, body = procs.post(self.conn, message, procs.mcp_headers(message, self.token))
        return json.loads(body)["result"]

    def audit_command(self, *args: str) -> subprocess.CompletedProcess[str]:
        return audit_command(self.config, self.env, *args)

    def audit_rows(self) -> list[tuple[Any, ...]]:
        return audit_rows(self.db, "id, principal, outcome, note_id, title, uri, workspace, trash, file_identity")

    def run_matrix(self, target_name: str, confined: bool) -> None:
        self.start(confined)
        f = self.folders
        who, self.token = SWAPPER[target_name]
        uri = folder_uri(os.path.join(f.dir, who))
        replaced = folder_paths.REPLACED.format(where=uri)
        ws = {"workspaceUri": uri}
        # Before the swap: a deletion and an update of her own (entries a restore could name),
        # a read's version, and a form for each confirmed tool, left unanswered.
        form = self.call(tools_call("notes_delete", {**ws, "title": "TPS alice old"}))
        done = self.call(
            tools_call(
                "notes_delete",
                {**ws, "title": "TPS alice old"},
                requestState=form["requestState"],
                inputResponses={
                    main.INPUT_KEY: {"action": "accept", "content": {"note_id": "old.md", "confirm": True}}
                },
            )
        )
        self.assertTrue(done["structuredContent"]["deleted"], done)
        version = self.call(tools_call("notes_read", {**ws, "noteId": "plan.md"}))["structuredContent"]["version"]
        update = {**ws, "noteId": "plan.md", "body": "# Plan alice\nsecond\n", "version": version}
        form = self.call(tools_call("notes_update", update))
        done = self.call(
            tools_call(
                "notes_update", update, requestState=form["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY)
            )
        )
        self.assertFalse(done["isError"], done)
        version = self.call(tools_call("notes_read", {**ws, "noteId": "plan.md"}))["structuredContent"]["version"]
        delete_args = {**ws, "title": "TPS"}
        update = {**ws, "noteId": "plan.md", "body": "# Plan\nwritten by alice\n", "version": version}
        move = {**ws, "noteId": "plan.md", "newPath": "moved.md"}
        pending = {
            name: (args, self.call(tools_call(name, args))["requestState"])
            for name, args in (("notes_delete", delete_args), ("notes_update", update), ("notes_move", move))
        }
        rows = self.audit_rows()
        target = f.target(target_name)
        before = tree(target)

        f.swap(target, who)
        self.addCleanup(f.unswap, who)  # the next test on this server finds her folder in its place
        calls = {
            "notes_delete (form)": tools_call("notes_delete", delete_args),
            "notes_search": tools_call("notes_search", {**ws, "query": "secret"}),
            "notes_read": tools_call("notes_read", {**ws, "noteId": "plan.md"}),
            "notes_read (offset)": tools_call("notes_read", {**ws, "noteId": "plan.md", "offset": 2, "length": 3}),
            "notes_list": tools_call("notes_list", ws),
            "notes_create": tools_call("notes_create", {**ws, "title": "Planted", "body": "by alice\n"}),
            "notes_create (folder)": tools_call(
                "notes_create", {**ws, "title": "Planted", "body": "by alice\n", "folder": "sub"}
            ),
            "notes_edit (form)": tools_call(
                "notes_edit", {**ws, "noteId": "plan.md", "oldText": "Plan", "newText": "Planted", "version": version}
            ),
            "notes_append": tools_call(
                "notes_append", {**ws, "noteId": "plan.md", "text": "appended by alice\n", "version": version}
            ),
            "notes_update (form)": tools_call("notes_update", update),
            "notes_move (form)": tools_call("notes_move", move),
        }
        answers = {main.INPUT_KEY: {"action": "accept", "content": {"note_id": "tps.md", "confirm": True}}}
        for name, key in (
            ("notes_delete", None),
            ("notes_update", notes_tools.UPDATE_KEY),
            ("notes_move", notes_tools.MOVE_KEY),
        ):
            args, state = pending[name]
            calls[f"{name} (accept)"] = tools_call(
                name, args, requestState=state, inputResponses=answers if key is None else accept(key)
            )
        sandbox_name = "on" if confined else "off"
        for name, message in calls.items():
            with self.subTest(tool=name):
                result = self.call(message)
                self.assertTrue(result.get("isError"), result)
                # A create into a folder names that folder, inside the replaced one.
                said = folder_paths.REPLACED.format(where=uri + "/sub") if name == "notes_create (folder)" else replaced
                self.assertEqual(result["content"][0]["text"], said)
                self.assertNotIn("requestState", result)
                self.matrix[(name, target_name, sandbox_name)] = "refused (REPLACED)"
        # The operator's commands: each opens the store and its folders afresh, as a new process does.
        update_entry = next(row[0] for row in rows if row[1:3] == (who, audit.UPDATED))
        delete_entry = next(row[0] for row in rows if row[1:3] == (who, audit.DELETED))
        for name, argv in (
            ("audit list", ("list",)),
            ("audit restore (deletion)", ("restore", str(delete_entry))),
            ("audit restore (update)", ("restore", str(update_entry))),
        ):
            with self.subTest(command=name):
                done_cmd = self.audit_command(*argv)
                said = (done_cmd.stdout + done_cmd.stderr).strip()
                self.assertNotIn("Traceback", said)
                if argv[0] == "restore":
                    self.assertNotEqual(done_cmd.returncode, 0, said)
                self.matrix[(name, target_name, sandbox_name)] = (
                    said.splitlines()[-1] if done_cmd.returncode else "listed, nothing changed"
                )
        # The folder reached: every file, byte and mode as it was; the audit: nothing new.
        self.assertEqual(tree(target), before)
        after = self.audit_rows()
        self.assertEqual(after, rows)
        self.assertFalse(any(target in str(value) for row in after for value in row))

    def test_every_tool_and_operator_command_refuses_a_link_to_bob_s_folder_with_the_sandbox(self) -> None:
        self.run_matrix("bob", confined=True)

    def test_every_tool_and_operator_command_refuses_a_link_to_bob_s_folder_without_the_sandbox(self) -> None:
        self.run_matrix("bob", confined=False)

    def test_every_tool_and_operator_command_refuses_a_link_to_an_outside_folder_with_the_sandbox(self) -> None:
        self.run_matrix("outside", confined=True)

    def test_every_tool_and_operator_command_refuses_a_link_to_an_outside_folder_without_the_sandbox(self) -> None:
        self.run_matrix("outside", confined=False)

    @classmethod
    def tearDownClass(cls) -> None:
        if os.environ.get(
            "NOTES_MCP_SWAP_MATRIX"
        ):  # for the docs: python3 -m unittest tests.test_folder_swap with it set
            for (name, target, confined), result in sorted(cls.matrix.items()):
                print(f"| {name} | {target} | {confined} | {result} |", file=sys.stderr)


class SwapInProcess(unittest.TestCase):
    """The store's own operations after a swap, driven in process: emptying the trash, recovery, preview, restore."""

    def setUp(self) -> None:
        self.folders = Folders(self)
        self.clock = Clock()

    def store(self) -> markdown_store.MarkdownNotesStore:
        nonces = sqlite_store.open_ledger(os.path.join(self.folders.dir, "nonces.db"), clock=self.clock)
        store = markdown_store.MarkdownNotesStore(
            [self.folders.alice], nonces, retention=audit.Retention(trash_seconds=1)
        )
        self.addCleanup(store.close)
        return store

    def test_emptying_recovery_and_preview_after_a_swap_touch_nothing_of_either_target(self) -> None:
        for name in TARGETS:
            with self.subTest(target=name):
                self.setUp()
                store = self.store()
                listed = store.candidates(folder_paths.root_path(self.folders.alice), "TPS")
                target = self.folders.target(name)
                before = tree(target)
                self.folders.swap(target)
                store.empty_trash()
                store.recover()
                self.assertEqual([store.preview(note) for note in listed], [None] * len(listed))
                self.assertEqual(tree(target), before)
                self.assertEqual(os.listdir(os.path.join(target, ".trash")), [OLD_TRASH])


class OtherPrincipalsSwap(unittest.TestCase):
    """alice's folder swapped: bob, served by the same store, deletes his own note and hears nothing of hers."""

    def test_a_deletion_in_bob_s_folder_is_not_refused_for_alice_s_replaced_one_and_never_names_it(self) -> None:
        folders = Folders(self)
        clock = Clock()
        nonces = sqlite_store.open_ledger(os.path.join(folders.dir, "nonces.db"), clock=clock)
        store = markdown_store.MarkdownNotesStore([folders.alice, folders.bob], nonces)
        self.addCleanup(store.close)
        bob_uri = folder_uri(folders.bob)
        server = frame.notes_server(
            keys=[KEY], notes=store, policy=main.AuthorizationPolicy({"bob": [bob_uri]}), clock=clock, log=Log()
        )
        args = {"workspaceUri": bob_uri, "title": "TPS bob secret"}
        form = server.handle(tools_call("notes_delete", args), "bob")
        assert form is not None
        # alice's root sorts first: the accept's re-walk meets her replaced folder before bob's.
        self.assertLess(folders.alice, folders.bob)
        folders.swap(folders.outside)
        done = server.handle(
            tools_call(
                "notes_delete",
                args,
                requestState=form["result"]["requestState"],
                inputResponses={
                    main.INPUT_KEY: {"action": "accept", "content": {"note_id": "tps.md", "confirm": True}}
                },
            ),
            "bob",
        )
        assert done is not None
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "tps.md"})
        self.assertFalse(os.path.exists(os.path.join(folders.bob, "tps.md")))


class OneWayIn(unittest.TestCase):
    """Structure: after start-up no open takes a root's path string; open_below takes only the Root opened at
    start-up."""

    def test_open_below_refuses_a_path_string_or_components(self) -> None:
        folders = Folders(self)
        for given in (folders.alice, folder_paths.root_path(folders.alice)):
            with self.subTest(given=given), self.assertRaises(TypeError):
                folder_paths.open_below(given, ())  # type: ignore[arg-type]

    def test_no_folder_module_names_a_path_to_the_os_outside_start_up(self) -> None:
        # Read from the source: every call that takes a path either names an entry relative to
        # an open folder (dir_fd=) or runs at start-up (the Root's own open, the check that
        # compares its path, the start-up test of nested roots).
        allowed = {
            ("folder_paths.py", "__init__", "open"),
            ("folder_paths.py", "replaced", "stat"),
            ("folder_paths.py", "same_folder", "open"),
            ("folder_paths.py", "same_folder", "stat"),
        }
        path_calls = {
            "open",
            "stat",
            "lstat",
            "mkdir",
            "rename",
            "replace",
            "unlink",
            "link",
            "rmdir",
            "access",
            "chmod",
            "chown",
            "listdir",
            "readlink",
            "symlink",
            "truncate",
            "utime",
        }
        found = set()
        for module in (
            "folder_paths.py",
            "folder_bodies.py",
            "folder_trash.py",
            "folder_index.py",
            "markdown_store.py",
        ):
            with open(os.path.join(os.path.dirname(folder_paths.__file__), module), encoding="utf-8") as handle:
                tree_ = ast.parse(handle.read())
            for function in ast.walk(tree_):
                if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(function):
                    if (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "os"
                        and node.func.attr in path_calls
                        and not any(k.arg in ("dir_fd", "src_dir_fd") for k in node.keywords)
                    ):
                        found.add((module, function.name, node.func.attr))
        self.assertEqual(found, allowed)

    @contextmanager
    def traced(self) -> Iterator[list[tuple[str, Any]]]:
        """Every file-system call made meanwhile that names a path without a folder descriptor, as (function, path)."""
        seen: list[tuple[str, Any]] = []
        patches = []
        for module, name in (
            (os, "open"),
            (os, "stat"),
            (os, "lstat"),
            (os, "mkdir"),
            (os, "rename"),
            (os, "unlink"),
            (os, "link"),
            (os, "chmod"),
            (os, "chown"),
            (os, "access"),
            (os, "scandir"),
            (os, "listdir"),
            (os, "rmdir"),
            (os, "setxattr"),
            (os, "getxattr"),
            (os, "listxattr"),
            (builtins, "open"),
        ):
            real = getattr(module, name)

            def wrapper(*args: Any, _real: Callable[..., Any] = real, _name: str = name, **kwargs: Any) -> Any:
                path = args[0] if args else kwargs.get("path")
                if isinstance(path, (str, bytes)) and kwargs.get("dir_fd", kwargs.get("src_dir_fd")) is None:
                    seen.append((_name, path))
                return _real(*args, **kwargs)

            patches.append(mock.patch.object(module, name, wrapper))
        for patch in patches:
            patch.start()
        try:
            yield seen
        finally:
            for patch in reversed(patches):
                patch.stop()

    def test_after_start_up_every_operation_opens_through_the_start_up_descriptor(self) -> None:
        folders = Folders(self)
        clock = Clock()
        nonces = sqlite_store.open_ledger(os.path.join(folders.dir, "nonces.db"), clock=clock)
        store = markdown_store.MarkdownNotesStore(
            [folders.alice, folders.bob], nonces, retention=audit.Retention(trash_seconds=1)
        )
        self.addCleanup(store.close)
        policy = main.AuthorizationPolicy({"alice": [folders.alice_uri]})
        server = frame.notes_server(keys=[KEY], notes=store, policy=policy, clock=clock, log=Log())
        audit.install(server)
        notes_tools.install(server)
        ws = {"workspaceUri": folders.alice_uri}
        alice = folder_paths.root_path(folders.alice)
        database = os.path.join(folders.dir, "nonces.db")

        def result(message: dict[str, Any]) -> dict[str, Any]:
            response = server.handle(message, "alice")
            assert response is not None
            self.assertNotIn("error", response, response)
            return response["result"]

        with self.traced() as seen:
            # Every operation a folder note knows: lookup, search, read, create, append, update,
            # move, delete, preview, restore of an update and of a deletion, emptying, recovery.
            self.assertFalse(result(tools_call("notes_search", {**ws, "query": "alice"}))["isError"])
            version = result(tools_call("notes_read", {**ws, "noteId": "plan.md"}))["structuredContent"]["version"]
            self.assertFalse(result(tools_call("notes_create", {**ws, "title": "New", "body": "new\n"}))["isError"])
            appended = result(
                tools_call("notes_append", {**ws, "noteId": "plan.md", "text": "more\n", "version": version})
            )
            version = appended["structuredContent"]["version"]
            update = {**ws, "noteId": "plan.md", "body": "# Plan\nnew\n", "version": version}
            form = result(tools_call("notes_update", update))
            self.assertFalse(
                result(
                    tools_call(
                        "notes_update",
                        update,
                        requestState=form["requestState"],
                        inputResponses=accept(notes_tools.UPDATE_KEY),
                    )
                )["isError"]
            )
            store.restore(next(e["id"] for e in store.audit_entries() if e["outcome"] == audit.UPDATED))
            move = {**ws, "noteId": "plan.md", "newPath": "moved.md"}
            form = result(tools_call("notes_move", move))
            self.assertFalse(
                result(
                    tools_call(
                        "notes_move",
                        move,
                        requestState=form["requestState"],
                        inputResponses=accept(notes_tools.MOVE_KEY),
                    )
                )["isError"]
            )
            listed = store.candidates(alice, "TPS")
            self.assertTrue(all(store.preview(note) is not None for note in listed))
            form = result(tools_call("notes_delete", {**ws, "title": "TPS alice old"}))
            done = result(
                tools_call(
                    "notes_delete",
                    {**ws, "title": "TPS alice old"},
                    requestState=form["requestState"],
                    inputResponses={
                        main.INPUT_KEY: {"action": "accept", "content": {"note_id": "old.md", "confirm": True}}
                    },
                )
            )
            self.assertTrue(done["structuredContent"]["deleted"], done)
            store.restore(next(e["id"] for e in store.audit_entries() if e["outcome"] == audit.DELETED))
            store.empty_trash()
            store.recover()
            store.count(alice)
        # The only calls naming a folder's path: the check that each root's path still leads to
        # its folder (a stat, never an open). The confirmations database checks its own files.
        reals = {opened.real for opened in store.dirs.values()}
        self.assertTrue(any(path in reals for _, path in seen))  # the tracer sees a path when one is named
        named = {(name, path) for name, path in seen if not str(path).startswith(database)}
        self.assertEqual({(name, path) for name, path in named if not (name == "stat" and path in reals)}, set())


if __name__ == "__main__":
    unittest.main()
