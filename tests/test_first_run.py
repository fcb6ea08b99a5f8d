"""A first run: the start-up report, scope from what was asked, errors that say what to do, refusals the operator
sees."""

from __future__ import annotations

import ast
import contextlib
import glob
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest
from typing import Any, cast
from unittest import mock

from helpers import procs, support
from helpers.support import accept, call, tps

import assemble
import config as configuration
import frame
import launch
import main
import serve
import settings
import sqlite_store
import stores
import streamable_http
from config import ConfigError

NOBODY = 65534  # the uid an unreadable file is read as when the tests run as root (root reads everything)


def env(folder: str, **extra: str) -> dict[str, str]:
    """The shared signing key and a state folder inside the test's tree."""
    return procs.server_env(
        **{"NOTES_MCP_SECRET": procs.SECRET, "XDG_STATE_HOME": os.path.join(folder, "state"), **extra}
    )


def folder_uri(path: str) -> str:
    return main.format_file_uri(tuple(part for part in path.split("/") if part))


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def startup_lines(
    test: unittest.TestCase, *args: str, extra_env: dict[str, str] | None = None, cwd: str | None = None
) -> tuple[int, list[str]]:
    """Run `serve --stdio ARGS` with stdin at EOF: (exit status, stderr lines)."""
    done = subprocess.run(
        [*procs.python(), procs.SERVE, "--stdio", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        env=extra_env, timeout=procs.GUARD, cwd=cwd,
    )  # fmt: skip
    test.assertNotIn("Traceback", done.stderr)
    return done.returncode, done.stderr.splitlines()


class Tree(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="first-run-")
        self.addCleanup(tmp.cleanup)
        self.dir = os.path.realpath(tmp.name)
        self.notes = os.path.join(self.dir, "Notes")
        write(os.path.join(self.notes, "tps.md"), "# TPS report\n")
        write(os.path.join(self.notes, "2025", "plan.md"), "# Plan 2025\n")
        write(os.path.join(self.notes, "2025", "chart.png"), "not a note, and not a skipped one either")


class StartupReportTests(Tree):
    """One short block on stderr: transport, principals, workspaces with counts, skipped entries by reason,
    confirmations, extensions."""

    def populate_skipped(self) -> None:
        write(os.path.join(self.dir, "elsewhere", "linked.md"), "# Linked\n")
        os.symlink(os.path.join(self.dir, "elsewhere", "linked.md"), os.path.join(self.notes, "link.md"))
        os.symlink(os.path.join(self.dir, "elsewhere"), os.path.join(self.notes, "linked-folder"))
        write(os.path.join(self.notes, "50% done.md"), "# Half\n")
        write(os.path.join(self.notes, "back\\slash.md"), "# Slash\n")
        write(os.path.join(self.notes, ".draft.md"), "# Hidden\n")
        os.mkfifo(os.path.join(self.notes, "pipe.md"))
        write(os.path.join(self.notes, "x" * 200 + ".md"), "# Too long an id\n")
        deep = os.path.join(self.notes, *["deep"] * markdown_store_depth(), "too-deep")
        write(os.path.join(deep, "buried.md"), "# Buried\n")

    def test_the_block_counts_notes_and_each_skipped_reason_and_holds_no_credential(self) -> None:
        self.populate_skipped()
        status, lines = startup_lines(self, "--notes-dir", self.notes, extra_env=env(self.dir))
        self.assertEqual(status, 0)
        prefixed = [line.removeprefix(serve.LOG_PREFIX + ": ") for line in lines]
        self.assertEqual(prefixed[0], "serving on stdio as principal 'alice'")
        self.assertEqual(prefixed[1], f"workspace {folder_uri(self.notes)} (alice): 2 notes")
        self.assertTrue(
            prefixed[2].startswith("notes store: Markdown folders (1): title index kept per file"), prefixed[2]
        )
        folder = prefixed[3]
        self.assertTrue(folder.startswith(f"folder {self.notes}: 2 notes; skipped "), folder)
        for reason, count in [
            ("symlinks", 2),  # a linked file and a linked folder
            ("names with % or \\ or another character a file URI cannot spell", 2),
            ("hidden names", 1),
            ("FIFOs, sockets or devices", 1),
            ("notes whose id or URI is too long", 1),
            (f"folders deeper than {markdown_store_depth()} levels", 1),
        ]:
            self.assertIn(f"{reason}: {count}", folder)
        self.assertEqual(
            prefixed[4], f"consumed confirmations: SQLite {os.path.join(self.dir, 'state', 'notes-mcp', 'nonces.db')}"
        )
        self.assertEqual(prefixed[5], "extensions: 2025-11-25 clients (loaded at their first initialize)")
        self.assertEqual(
            prefixed[6], "confirmation page: off (hosts without forms get -32021; --confirm-in-browser turns it on)"
        )
        self.assertTrue(prefixed[7].startswith("sandbox: "), prefixed[7])  # code/sandbox.py's status, last
        self.assertEqual(len(lines), 8)
        self.assertNotIn(procs.SECRET, "\n".join(lines))
        self.assertNotIn(main.LESSON_WORKSPACE, "\n".join(lines))

    def test_a_folder_with_nothing_to_serve_says_so_instead_of_looking_like_a_working_setup(self) -> None:
        empty = os.path.join(self.dir, "Empty")
        os.mkdir(empty)
        os.symlink(os.path.join(self.notes, "tps.md"), os.path.join(empty, "tps.md"))
        _, lines = startup_lines(self, "--notes-dir", empty, extra_env=env(self.dir))
        self.assertIn(
            f"{serve.LOG_PREFIX}: workspace {folder_uri(empty)} (alice): 0 notes (nothing will be offered)", lines
        )
        self.assertIn(f"{serve.LOG_PREFIX}: folder {empty}: 0 notes; skipped symlinks: 1", lines)

    def test_an_unreadable_file_is_counted_as_unreadable(self) -> None:
        import markdown_store

        secret = os.path.join(self.notes, "locked.md")
        write(secret, "# Locked\n")
        os.chmod(secret, 0)
        for path in (self.dir, self.notes, os.path.join(self.notes, "2025")):
            os.chmod(path, 0o755)
        lines = run_as_unprivileged(lambda: survey_line(markdown_store, self.notes))
        self.assertEqual(lines, "2 notes; skipped unreadable files: 1")

    def test_the_folder_store_counts_without_opening_notes_and_reuses_describe_once(self) -> None:
        import markdown_store

        nonces = sqlite_store.open_ledger(os.path.join(self.dir, "nonces.db"), clock=support.Clock())
        self.addCleanup(nonces.close)
        store = markdown_store.MarkdownNotesStore([self.notes], nonces)
        root = main.parse_file_uri(folder_uri(self.notes))
        self.assertEqual(store.describe()[1:], [f"folder {self.notes}: 2 notes; skipped nothing"])
        write(os.path.join(self.notes, "late.md"), "# Late\n")
        self.assertEqual(store.count(root), 2)  # the count describe() just made: the report walks once
        self.assertEqual(store.count(root), 3)  # taken once; later counts walk again
        self.assertEqual(store.count(main.parse_file_uri(folder_uri(os.path.join(self.notes, "2025")))), 1)
        self.assertEqual(store.count(main.parse_file_uri("file:///elsewhere")), 0)
        self.assertEqual(len(store.candidates(root, "")), 3)  # the same notes a listing offers

    def test_the_counting_walk_agrees_with_the_listing_at_the_id_and_uri_bounds(self) -> None:
        import markdown_store

        # A root whose URI leaves room for names of 46 and 47 characters, and no more.
        root = self.dir
        while len(folder_uri(root)) < main.MAX_URI_LENGTH - 60:
            root = os.path.join(root, "r" * min(200, main.MAX_URI_LENGTH - 60 - len(folder_uri(root))))
        root = os.path.join(root, "p" * (main.MAX_URI_LENGTH - 48 - len(folder_uri(root)) - 1))
        room = main.MAX_URI_LENGTH - len(folder_uri(root)) - 1
        for length in (room, room + 1):
            write(os.path.join(root, "x" * (length - 3) + ".md"), "# Edge\n")
        for length in (stores.MAX_NOTE_ID_LENGTH, stores.MAX_NOTE_ID_LENGTH + 1):
            write(os.path.join(self.notes, "y" * (length - 3) + ".md"), "# Edge\n")
        nonces = sqlite_store.open_ledger(os.path.join(self.dir, "nonces.db"), clock=support.Clock())
        self.addCleanup(nonces.close)
        for folder, expected in ((root, 1), (self.notes, 3)):
            with self.subTest(folder=folder[-20:]):
                store = markdown_store.MarkdownNotesStore([folder], nonces)
                workspace = main.parse_file_uri(folder_uri(folder))
                self.assertEqual(store.count(workspace), expected)
                self.assertEqual(len(store.candidates(workspace, "")), expected)  # what a listing offers

    def test_http_names_the_address_and_every_principal_but_no_token(self) -> None:
        config = procs.write_config(self, {
            "principals": {
                "alice": {"token": procs.TOKEN, "workspaces": [support.WORKSPACE]},
                "bob": {"token": "bob-token-0123456789abcdef", "workspaces": []},
            },
            "stdioPrincipal": "alice",
            "notes": [{"id": "n1", "title": "TPS", "uri": support.WORKSPACE + "/n1.md"}],
            "db": "postgresql://reader:hunter2hunter2@db.example:5433/notes",
        })  # fmt: skip
        # The PostgreSQL URL is never opened: the report is checked by its pure function.
        parsed = resolved(["--http", "--config", config], configuration.load_config(config))
        server = frame.notes_server(
            keys=[support.KEY],
            notes=stores.MemoryStore([], main.MemoryReplayStore(support.Clock())),
            policy=main.AuthorizationPolicy({"alice": [support.WORKSPACE], "bob": []}),
            clock=support.Clock(),
        )
        lines = launch.startup_report(server, parsed, "listening on http://127.0.0.1:1/mcp")
        self.assertEqual(lines[:3], [
            "listening on http://127.0.0.1:1/mcp",
            "principals: alice, bob (each by its bearer token)",
            f"workspace {support.WORKSPACE} (alice): 0 notes (nothing will be offered)",
        ])  # fmt: skip
        self.assertIn("consumed confirmations: PostgreSQL db.example:5433/notes", lines)
        self.assertEqual(launch.startup_report(server, parsed, "t", extra=["sandbox: on"])[-1], "sandbox: on")
        text = "\n".join(lines)
        for secret in (procs.TOKEN, "bob-token-0123456789abcdef", "hunter2hunter2", "reader"):
            self.assertNotIn(secret, text)

    def test_each_line_says_what_this_setup_has(self) -> None:
        import markdown_store

        lesson = configuration.lesson_config()
        memory = frame.notes_server(
            keys=[support.KEY],
            notes=stores.MemoryStore(lesson["notes"], main.MemoryReplayStore(support.Clock())),
            policy=main.AuthorizationPolicy({"alice": [support.WORKSPACE]}),
            clock=support.Clock(),
        )
        no_auth = launch.startup_report(memory, resolved(["--http", "--no-auth"]), "t")
        self.assertEqual(no_auth[1], "principals: no bearer token (--no-auth): every request acts as 'alice'")
        self.assertEqual(
            assemble.confirmations_home(dict(lesson, db="notes.db")), f"SQLite {os.path.abspath('notes.db')}"
        )
        self.assertEqual(
            assemble.confirmations_home(dict(lesson, db="postgresql:///notes")), "PostgreSQL local socket/notes"
        )
        self.assertEqual(launch.extensions(resolved(["--stdio"], dict(configuration.lesson_config(), publish=True))), [
            "2025-11-25 clients (loaded at their first initialize)", "notes_publish and its connect pages"
        ])  # fmt: skip
        self.assertEqual(
            launch.extensions(resolved(["--http", "--conformance-fixtures", "--no-legacy"])),
            ["conformance fixtures (testing only)"],
        )
        nonces = sqlite_store.open_ledger(os.path.join(self.dir, "nonces.db"), clock=support.Clock())
        self.addCleanup(nonces.close)
        crowded = markdown_store.MarkdownNotesStore([self.notes], nonces, max_walk_entries=1)
        self.assertEqual(
            assemble.note_count(crowded, folder_uri(self.notes)),
            "cannot be listed (That notes folder holds more than 1 entries; serve a smaller folder (a sub-folder) "
            "instead.)",
        )
        self.assertEqual(
            crowded.describe()[1:],
            [
                f"folder {self.notes}: That notes folder holds more than 1 entries; serve a smaller folder (a "
                "sub-folder) instead."
            ],
        )

    def test_a_real_http_server_prints_the_block_after_its_url(self) -> None:
        server = procs.HttpServer(self, "--notes-dir", self.notes, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        self.assertTrue(server.wait_for_line("extensions:"))
        lines = [line.removeprefix(serve.LOG_PREFIX + ": ") for line in server.stderr_lines]
        start = next(index for index, line in enumerate(lines) if line.startswith("listening on http://127.0.0.1:"))
        self.assertEqual(lines[start + 1], "principals: alice (each by its bearer token)")
        self.assertEqual(lines[start + 2], f"workspace {folder_uri(self.notes)} (alice): 2 notes")
        self.assertNotIn(procs.TOKEN, server.stderr_text())

    def test_the_lesson_fixture_reports_its_workspace_and_memory(self) -> None:
        _, lines = startup_lines(self, extra_env=env(self.dir))
        self.assertIn(f"{serve.LOG_PREFIX}: workspace {main.LESSON_WORKSPACE} (alice): 4 notes", lines)
        self.assertIn(
            f"{serve.LOG_PREFIX}: consumed confirmations: in memory (this process only; lost when it exits)", lines
        )

    def test_no_legacy_and_publish_change_the_extensions_line(self) -> None:
        _, lines = startup_lines(self, "--no-legacy", extra_env=env(self.dir))
        self.assertIn(f"{serve.LOG_PREFIX}: extensions: none", lines)
        _, lines = startup_lines(self, "--publish", extra_env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        self.assertIn(
            f"{serve.LOG_PREFIX}: extensions: 2025-11-25 clients (loaded at their first initialize), notes_publish "
            "and its connect pages",
            lines,
        )


def markdown_store_depth() -> int:
    """MAX_WALK_DEPTH: sub-folder levels a walk descends."""
    import folder_paths

    return folder_paths.MAX_WALK_DEPTH


def survey_line(markdown_store: Any, folder: str) -> str:
    """What the folder store's start-up survey says of `folder`: its note count and skipped entries."""
    import folder_paths

    root = folder_paths.Root(folder_paths.root_path(folder), os.path.realpath(folder))
    survey = markdown_store.Survey(root.path)
    fd = folder_paths.open_below(root, ())
    assert fd is not None  # the root was opened just above
    try:
        folder_paths.walk(fd, (), survey, 0)
    finally:
        os.close(fd)
        root.close()
    skipped = "; ".join(f"{reason}: {count}" for reason, count in sorted(survey.skipped.items()))
    return f"{survey.surveyed} notes; skipped {skipped or 'nothing'}"


def run_as_unprivileged(function: Any) -> Any:
    """function() with permissions enforced: here if not root, else in a child that became `nobody` (its JSON
    result)."""
    if os.geteuid() != 0:
        return function()
    read, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, run, send the result, exit without cleanups
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write_end, json.dumps(function()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


class ScopeFromWhatWasAskedTests(Tree):
    """--notes-dir without a config grants exactly the folders; a symlinked folder is served where the operator wrote
    it."""

    def stdio(self, *args: str) -> procs.StdioServer:
        return procs.StdioServer(self, *args, env=env(self.dir))

    def test_with_notes_dir_the_lesson_workspace_is_not_granted_and_not_listed(self) -> None:
        server = self.stdio("--notes-dir", self.notes)
        refused = server.exchange(call(tps()))["result"]
        self.assertTrue(refused["isError"])
        text = refused["content"][0]["text"]
        self.assertIn(f"Your workspaces: {folder_uri(self.notes)}.", text)
        self.assertNotIn(main.LESSON_WORKSPACE, text)

    def test_a_folder_reached_through_a_symlink_is_served_at_the_written_path_and_resolved_once(self) -> None:
        alias = os.path.join(self.dir, "alias")
        os.symlink(self.notes, alias)
        server = self.stdio("--notes-dir", alias)
        self.assertTrue(server.wait_for_line("folder "))
        self.assertIn(
            f"{serve.LOG_PREFIX}: folder {alias} (resolved at start-up to {self.notes}): 2 notes; skipped nothing",
            server.stderr_lines,
        )
        other = os.path.join(self.dir, "Other")
        write(os.path.join(other, "tps.md"), "# TPS other\n")
        os.remove(alias)
        os.symlink(other, alias)  # re-pointed after start-up: the folder resolved then is still the one served
        first = server.exchange(call(tps(workspace=folder_uri(alias), title="TPS")))["result"]
        options = first["inputRequests"][main.INPUT_KEY]["params"]["requestedSchema"]["properties"]["note_id"]["oneOf"]
        self.assertEqual(options, [{"const": "tps.md", "title": "TPS report"}])
        retry = call(
            tps(workspace=folder_uri(alias), title="TPS"),
            id=2,
            requestState=first["requestState"],
            inputResponses=accept("tps.md"),
        )
        self.assertTrue(server.exchange(retry)["result"]["structuredContent"]["deleted"])
        self.assertFalse(os.path.exists(os.path.join(self.notes, "tps.md")))
        self.assertTrue(os.path.exists(os.path.join(other, "tps.md")))

    def test_a_vault_linked_into_another_folder_is_its_own_root_and_the_outer_walk_still_skips_the_link(self) -> None:
        import markdown_store

        vault = os.path.join(self.dir, "Vault")
        write(os.path.join(vault, "idea.md"), "# Idea\n")
        linked = os.path.join(self.notes, "vault")
        os.symlink(vault, linked)
        nonces = sqlite_store.open_ledger(os.path.join(self.dir, "nonces.db"), clock=support.Clock())
        self.addCleanup(nonces.close)
        store = markdown_store.MarkdownNotesStore([self.notes, linked], nonces)
        self.assertEqual(store.workspace_uris(), [folder_uri(self.notes), folder_uri(linked)])
        inner = store.candidates(main.parse_file_uri(folder_uri(linked)), "")
        self.assertEqual([(note.id, note.uri) for note in inner], [("idea.md", folder_uri(linked) + "/idea.md")])
        outer = store.candidates(main.parse_file_uri(folder_uri(self.notes)), "")
        self.assertEqual(
            sorted(note.id for note in outer), ["2025/plan.md", "tps.md"]
        )  # the link itself is still not followed

    def test_a_real_sub_folder_configured_beside_its_parent_is_still_dropped(self) -> None:
        import markdown_store

        nonces = sqlite_store.open_ledger(os.path.join(self.dir, "nonces.db"), clock=support.Clock())
        self.addCleanup(nonces.close)
        store = markdown_store.MarkdownNotesStore([self.notes, os.path.join(self.notes, "2025")], nonces)
        self.assertEqual(store.workspace_uris(), [folder_uri(self.notes)])


class ErrorsThatSayWhatToDoTests(Tree):
    """Each start-up error names the field and says how to fix it, in one line, exit 2."""

    def refused(self, *args: str, cwd: str | None = None, **extra: str) -> str:
        """The one line a real `serve --stdio ARGS` prints refusing to start, with exit 2."""
        status, lines = startup_lines(self, *args, extra_env=env(self.dir, **extra), cwd=cwd)
        self.assertEqual(status, serve.EXIT_USAGE)
        self.assertEqual(len(lines), 1, lines)
        return lines[0]

    def refused_here(self, *args: str, **extra: str) -> str:
        """The same refusal from serve.start in this process (the code the command runs), where the working directory
        is not the point: the line and the exit status the command would have."""
        status, lines = refused_start("--stdio", *args, environ=env(self.dir, **extra))
        self.assertEqual(status, serve.EXIT_USAGE)
        self.assertEqual(len(lines), 1, lines)
        return lines[0]

    def test_a_missing_folder_says_it_does_not_exist(self) -> None:
        missing = os.path.join(self.dir, "absent")
        self.assertEqual(
            self.refused_here("--notes-dir", missing),
            f"{serve.LOG_PREFIX}: --notes-dir: notes folder {missing} does not exist",
        )

    def test_a_file_says_it_is_not_a_directory_but_a_file(self) -> None:
        note = os.path.join(self.notes, "tps.md")
        self.assertEqual(
            self.refused_here("--notes-dir", note),
            f"{serve.LOG_PREFIX}: --notes-dir: notes folder {note} is not a directory (it is a file)",
        )

    def test_a_tilde_says_hosts_do_not_expand_it_and_shows_the_path_meant(self) -> None:
        line = self.refused_here("--notes-dir", "~/Notes", HOME=self.dir)
        self.assertIn("starts with ~, which is not expanded here (hosts start servers without a shell)", line)
        self.assertTrue(line.endswith(f"write the absolute path, e.g. {self.notes}"), line)

    def test_a_relative_path_names_the_working_directory_and_the_resolved_path(self) -> None:
        line = self.refused("--notes-dir", "Nope", cwd=self.dir)
        self.assertEqual(
            line,
            f"{serve.LOG_PREFIX}: --notes-dir: notes folder {os.path.join(self.dir, 'Nope')} does not exist "
            f"(relative to the working directory {self.dir}, which a host chooses; pass an absolute path)",
        )

    def test_a_relative_path_that_exists_is_served_and_the_report_shows_it_resolved(self) -> None:
        status, lines = startup_lines(self, "--notes-dir", "Notes", extra_env=env(self.dir), cwd=self.dir)
        self.assertEqual(status, 0)
        self.assertIn(f"{serve.LOG_PREFIX}: workspace {folder_uri(self.notes)} (alice): 2 notes", lines)

    def test_a_config_folder_error_names_the_field_by_its_full_path(self) -> None:
        missing = os.path.join(self.dir, "absent")
        config = procs.write_config(self, {
            "principals": {
                "alice": {"token": procs.TOKEN, "workspaces": [], "notesDirs": [self.notes]},
                "bob": {"token": "bob-token-0123456789abcdef", "workspaces": [], "notesDirs": [missing]},
            },
            "stdioPrincipal": "alice",
        })  # fmt: skip
        self.assertEqual(
            self.refused_here("--config", config),
            f"{serve.LOG_PREFIX}: config {config}: principals.bob.notesDirs[0]: notes folder {missing} does not exist",
        )

    def test_the_secret_errors_say_the_expected_form_and_never_echo_the_value(self) -> None:
        cases = [
            (
                "zz" * 32,
                "NOTES_MCP_SECRET[0]: must be hex digits only (0-9, a-f): a key is at least 64 hex digits (32 bytes)",
            ),
            ("a" * 65, "NOTES_MCP_SECRET[0]: has an odd number of hex digits (65): a key is at least 64 hex digits"),
            ("ab" * 10, "NOTES_MCP_SECRET[0]: is 20 hex digits (10 bytes): a key is at least 64 hex digits"),
            (support.KEY.hex() + ",0g", "NOTES_MCP_SECRET[1]: must be hex digits only"),
        ]
        for secret, expected in cases:
            with self.subTest(secret=secret[:8]):
                with self.assertRaises(ConfigError) as raised:
                    assemble.signing_keys({}, {"NOTES_MCP_SECRET": secret})
                self.assertTrue(str(raised.exception).startswith(expected), str(raised.exception))
                self.assertIn("secrets.token_hex(32)", str(raised.exception))
                self.assertNotIn(secret.split(",")[-1], str(raised.exception))
        self.assertEqual(
            assemble.signing_keys({}, {"NOTES_MCP_SECRET": "AB" * 32}), [bytes([0xAB]) * 32]
        )  # upper case is hex too

    def test_the_secret_error_reaches_the_operator_in_one_line(self) -> None:
        line = self.refused(NOTES_MCP_SECRET="zz" * 32)
        self.assertIn("NOTES_MCP_SECRET[0]: must be hex digits only", line)
        self.assertNotIn("zz" * 32, line)


class MetaErrorTests(unittest.TestCase):
    """`_meta` without a key says "missing"; with a key of the wrong type, what it must be."""

    def test_missing_and_wrong_typed_meta_keys_are_told_apart(self) -> None:
        server = support.make_server()
        cases: list[tuple[str, Any, str]] = [
            (
                main.META_CLIENT_CAPABILITIES,
                None,
                f"_meta[{main.META_CLIENT_CAPABILITIES!r}] is missing (send {{}} for a client with none)",
            ),
            (main.META_CLIENT_CAPABILITIES, [], f"_meta[{main.META_CLIENT_CAPABILITIES!r}] must be an object"),
            (main.META_PROTOCOL_VERSION, None, f"_meta[{main.META_PROTOCOL_VERSION!r}] is missing"),
            (main.META_PROTOCOL_VERSION, 7, f"_meta[{main.META_PROTOCOL_VERSION!r}] must be a string"),
        ]
        for key, value, expected in cases:
            with self.subTest(key=key, value=value):
                message = support.request("tools/list")
                if value is None:
                    del message["params"]["_meta"][key]
                else:
                    message["params"]["_meta"][key] = value
                error = support.answered(server, message, support.PRINCIPAL)["error"]
                self.assertEqual(error["code"], main.INVALID_PARAMS)
                self.assertEqual(error["message"], f"Invalid params: {expected}")


class RefusalLogTests(unittest.TestCase):
    """HTTP refusals reach the operator's log, one line each, rate-limited per peer and reason, with bounded memory."""

    def setUp(self) -> None:
        self.clock = support.Clock()
        self.log = support.Log()
        self.refusals = streamable_http.RefusalLog(self.log, self.clock)

    def test_one_line_names_the_status_the_peer_and_the_reason(self) -> None:
        self.refusals(("192.0.2.7", 5555), 401, "Unauthorized: a valid bearer token is required")
        self.assertEqual(self.log, ["refused HTTP 401 to 192.0.2.7: Unauthorized: a valid bearer token is required"])

    def test_the_same_peer_and_reason_within_the_window_is_counted_not_logged_then_summed(self) -> None:
        for port in range(100):
            self.refusals(("192.0.2.7", port), 401, "Unauthorized")
        self.refusals(("192.0.2.7", 1), 415, "Unsupported Media Type")  # another reason: its own line
        self.refusals(("192.0.2.8", 1), 401, "Unauthorized")  # another peer: its own line
        self.assertEqual(len(self.log), 3)
        self.clock.now += streamable_http.REFUSAL_LOG_WINDOW_SECONDS - 0.001
        self.refusals(("192.0.2.7", 1), 401, "Unauthorized")
        self.assertEqual(len(self.log), 3)  # still inside the window
        self.clock.now += 0.001
        self.refusals(("192.0.2.7", 1), 401, "Unauthorized")
        self.assertEqual(
            self.log[3:],
            [
                "refused 100 more HTTP request(s) in the last 60 s without a line each (one line per peer and "
                "reason, at most 20 per 60 s)",
                "refused HTTP 401 to 192.0.2.7: Unauthorized",
            ],
        )

    def test_many_peers_together_get_at_most_the_window_budget_of_lines(self) -> None:
        flood = streamable_http.MAX_REFUSAL_LINES_PER_WINDOW * 10
        for index in range(flood):
            self.refusals((f"2001:db8::{index:x}", 1), 401, "Unauthorized")
        self.assertEqual(len(self.log), streamable_http.MAX_REFUSAL_LINES_PER_WINDOW)
        self.clock.now += streamable_http.REFUSAL_LOG_WINDOW_SECONDS
        self.refusals(("2001:db8::ffff", 1), 401, "Unauthorized")
        self.assertIn(
            f"refused {flood - streamable_http.MAX_REFUSAL_LINES_PER_WINDOW} more HTTP request(s)", self.log[-2]
        )

    def test_memory_is_bounded_by_the_key_limit(self) -> None:
        for index in range(streamable_http.MAX_REFUSAL_KEYS * 3):
            self.clock.now += streamable_http.REFUSAL_LOG_WINDOW_SECONDS  # every refusal logged, each a new key
            self.refusals((f"198.51.{index // 256}.{index % 256}", 1), 403, "Forbidden")
        self.assertEqual(len(self.refusals.last), streamable_http.MAX_REFUSAL_KEYS)

    def test_the_oldest_pair_is_forgotten_first(self) -> None:
        for index in range(streamable_http.MAX_REFUSAL_KEYS + 1):  # one window each, so every pair gets its line
            self.clock.now += streamable_http.REFUSAL_LOG_WINDOW_SECONDS
            self.refusals((f"198.51.100.{index % 256}", index // 256), 403, f"Forbidden {index}")
        self.clock.now += 1  # the same window as the last one: a remembered pair stays quiet
        before = len(self.log)
        self.refusals(("198.51.100.0", 0), 403, "Forbidden 0")  # the first pair: forgotten, so logged again
        newest = streamable_http.MAX_REFUSAL_KEYS
        self.refusals(
            (f"198.51.100.{newest % 256}", newest // 256), 403, f"Forbidden {newest}"
        )  # the newest: still quiet
        self.assertEqual(self.log[before:], ["refused HTTP 403 to 198.51.100.0: Forbidden 0"])

    def test_a_real_server_logs_each_refusal_with_its_peer_and_no_token_or_body(self) -> None:
        server = procs.HttpServer(self)
        conn = server.connect(self)
        wrong = "wrong-token-0123456789abcdefXYZ"
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": main.request_meta({})}}
        status, _, _ = procs.post(conn, body, procs.mcp_headers(body, wrong))
        self.assertEqual(status, 401)
        conn = server.connect(self)
        headers = procs.mcp_headers(body) | {"Content-Type": "text/plain"}
        self.assertEqual(procs.post(conn, b"SECRET-BODY-TEXT", headers)[0], 415)
        conn = server.connect(self)
        self.assertEqual(procs.post(conn, body, procs.mcp_headers(body) | {"Accept": "text/html"})[0], 406)
        self.assertEqual(
            procs.raw_exchange(server.port, b"GET /mcp HTTP/1.1\nHost: x\n\n")[:12], b"HTTP/1.1 400"
        )  # the engine's own
        self.assertTrue(server.wait_for_line("refused HTTP 400"))
        lines = [line for line in server.stderr_lines if "refused HTTP" in line]
        self.assertEqual(
            lines,
            [
                f"{serve.LOG_PREFIX}: refused HTTP 401 to 127.0.0.1: Unauthorized: a valid bearer token is required",
                f"{serve.LOG_PREFIX}: refused HTTP 415 to 127.0.0.1: Unsupported Media Type: send application/json",
                f"{serve.LOG_PREFIX}: refused HTTP 406 to 127.0.0.1: Not Acceptable: this server answers with "
                "application/json",
                f"{serve.LOG_PREFIX}: refused HTTP 400 to 127.0.0.1: Bad Request: lines must end with CRLF",
            ],
        )
        text = server.stderr_text()
        for secret in (wrong, procs.TOKEN, "SECRET-BODY-TEXT", "tools/list"):
            self.assertNotIn(secret, text)


class NormalizedMatchingTests(Tree):
    """NFC before casefolding in the stores main.py's contract test does not cover: folders and config-seeded notes."""

    def test_a_folder_note_titled_decomposed_is_found_by_the_composed_query_and_the_other_way(self) -> None:
        import markdown_store

        write(os.path.join(self.notes, "cafe.md"), "# Cafe\u0301 notes\n")  # NFD, as macOS writes names
        write(os.path.join(self.notes, "creme.md"), "# Cr\u00e8me list\n")  # NFC
        nonces = sqlite_store.open_ledger(os.path.join(self.dir, "nonces.db"), clock=support.Clock())
        self.addCleanup(nonces.close)
        store = markdown_store.MarkdownNotesStore([self.notes], nonces)
        workspace = main.parse_file_uri(folder_uri(self.notes))
        self.assertEqual([note.id for note in store.candidates(workspace, "caf\u00e9")], ["cafe.md"])
        self.assertEqual([note.id for note in store.candidates(workspace, "CAFE\u0301")], ["cafe.md"])
        self.assertEqual([note.id for note in store.candidates(workspace, "cre\u0300me")], ["creme.md"])
        self.assertEqual(store.candidates(workspace, "cafe notes"), [])  # normalized, not stripped of accents

    def test_a_config_seeded_note_titled_decomposed_is_offered_for_the_composed_query(self) -> None:
        config = procs.write_config(self, {
            "principals": {"alice": {"token": procs.TOKEN, "workspaces": [support.WORKSPACE]}},
            "notes": [
                {"id": "n-cafe", "title": "Cafe\u0301 notes", "uri": support.WORKSPACE + "/cafe.md"},
                {"id": "n-tea", "title": "Tea notes", "uri": support.WORKSPACE + "/tea.md"},
            ],
        })  # fmt: skip
        server = procs.StdioServer(self, "--config", config, env=env(self.dir))
        first = server.exchange(call(tps(title="CAF\u00c9")))["result"]
        options = first["inputRequests"][main.INPUT_KEY]["params"]["requestedSchema"]["properties"]["note_id"]["oneOf"]
        self.assertEqual(options, [{"const": "n-cafe", "title": "Cafe\u0301 notes"}])


if __name__ == "__main__":
    unittest.main()


# ------------------------------------------------------------------ the Python version, the command line, the log


def older_pythons() -> dict[tuple[int, ...], str]:
    """Python 3 interpreters on this machine older than 3.11 (`python3.X` on PATH, pyenv's, the system's): version ->
    path."""
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    # pyenv's shims run its shell script at each call; the versions they dispatch to are probed below by their paths.
    shims = os.path.join(pyenv, "shims")
    on_path = [shutil.which(f"python3.{minor}") for minor in range(6, 11)]
    candidates = [path for path in on_path if path and os.path.dirname(path) != shims]
    candidates += sorted(glob.glob(os.path.join(pyenv, "versions", "3.*", "bin", "python3")))
    candidates += ["/usr/bin/python3", "/usr/local/bin/python3"]
    found: dict[tuple[int, ...], str] = {}
    for path in candidates:
        if not path or not os.access(path, os.X_OK):
            continue
        probe = subprocess.run([path, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                               capture_output=True, text=True, timeout=procs.GUARD, env=procs.server_env())  # fmt: skip
        version = probe.stdout.strip()  # a pyenv shim for a version not selected prints nothing and fails
        if probe.returncode == 0 and version and tuple(map(int, version.split("."))) < (3, 11):
            found.setdefault(tuple(map(int, version.split("."))), path)
    return dict(sorted(found.items()))


OLDER_PYTHONS = older_pythons()
NEEDED = "notes-mcp: needs Python 3.11 or later; this is Python "


def as_package(test: unittest.TestCase) -> str:
    """A folder where `notes_mcp` is code/, as `pip install .` lays it out: a PYTHONPATH for `python -m notes_mcp`."""
    folder = tempfile.mkdtemp(prefix="as-package-")
    test.addCleanup(shutil.rmtree, folder, True)
    os.symlink(support.CODE, os.path.join(folder, "notes_mcp"))
    return folder


class OlderPythonTests(unittest.TestCase):
    """Under Python 3.10 or older every entry point says so in one line and exits 2, before any other import."""

    def refusal(self, done: subprocess.CompletedProcess[str], version: str) -> None:
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertEqual(done.stdout, "")
        self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
        self.assertTrue(done.stderr.startswith(NEEDED + version + " ("), done.stderr)

    @unittest.skipUnless(
        OLDER_PYTHONS, "no Python older than 3.11 on this machine: the patched-version test below stands in"
    )
    def test_a_real_older_python_gets_one_line_from_serve_py_the_command_and_python_m(self) -> None:
        scratch = tempfile.mkdtemp(prefix="older-python-")
        self.addCleanup(shutil.rmtree, scratch, True)
        notes = os.path.join(scratch, "Notes")
        write(os.path.join(notes, "tps.md"), "# TPS report\n")
        package = as_package(self)
        for numbers, python in OLDER_PYTHONS.items():
            version = ".".join(map(str, numbers))
            entries = {"serve.py": [python, procs.SERVE, "--stdio", "--notes-dir", notes]}
            if numbers >= (3, 7):  # 3.6 cannot compile the package's `from __future__ import annotations`
                entries["python -m notes_mcp"] = [python, "-m", "notes_mcp", "--stdio"]
                entries["notes-mcp (the console script)"] = [
                    python,
                    "-c",
                    "import sys; from notes_mcp.cli import run; sys.exit(run())",
                    "--stdio",
                ]
                entries["notes-mcp demo"] = [
                    python,
                    "-c",
                    "import sys; from notes_mcp.cli import run; sys.exit(run())",
                    "demo",
                ]
            for name, argv in entries.items():
                with self.subTest(python=version, entry=name):
                    done = subprocess.run(
                        argv,
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        text=True,
                        timeout=procs.GUARD,
                        env=procs.server_env(PYTHONPATH=package, XDG_STATE_HOME=os.path.join(scratch, "state")),
                    )
                    self.refusal(done, version)
                    self.assertIn(f"({python})", done.stderr)
        self.assertFalse(os.path.exists(os.path.join(scratch, "state")))  # refused before any store was opened

    @unittest.skipUnless(
        [v for v in OLDER_PYTHONS if v >= (3, 9)],
        "no Python 3.9 or 3.10 here: the lesson's demo on them is not checked",
    )
    def test_the_lesson_demo_still_runs_on_python_3_9_and_3_10(self) -> None:
        for numbers, python in OLDER_PYTHONS.items():
            if numbers < (3, 9):
                continue  # main.py's `tuple[str, ...]` needs 3.9
            with self.subTest(python=python):
                done = subprocess.run(
                    [python, os.path.join(support.CODE, "main.py")],
                    capture_output=True,
                    text=True,
                    timeout=procs.GUARD,
                    env=procs.server_env(),
                )
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertIn("tools/call, id 2", done.stdout)

    def patched(self, run: str, *argv: str) -> subprocess.CompletedProcess[str]:
        """This Python, told it is 3.10.13 before `run` starts an entry as its own process would; stderr gets the
        project modules loaded."""
        script = (
            "import sys, runpy\n"
            "sys.version_info = (3, 10, 13, 'final', 0)\n"
            f"sys.argv = {['entry', *argv]!r}\n"
            "try:\n"
            f"    {run}\n"
            "finally:\n"
            "    print('loaded:', sorted(name for name in sys.modules if name.split('.')[-1] in "
            f"{sorted(PROJECT_MODULES)!r}), file=sys.stderr)\n"
        )
        return subprocess.run(
            [sys.executable, "-c", script],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=procs.GUARD,
            env=procs.server_env(PYTHONPATH=as_package(self)),
        )

    def test_under_a_patched_version_each_entry_refuses_before_importing_any_other_module(self) -> None:
        runs = {
            "serve.py": (f"runpy.run_path({procs.SERVE!r}, run_name='__main__')", []),
            "python -m notes_mcp": (
                "runpy.run_module('notes_mcp', run_name='__main__', alter_sys=True)",
                ["notes_mcp", "notes_mcp.__main__", "notes_mcp.cli"],
            ),
            "notes-mcp demo": ("from notes_mcp.cli import run; sys.exit(run())", ["notes_mcp", "notes_mcp.cli"]),
        }
        for name, (run, allowed) in runs.items():
            with self.subTest(entry=name):
                done = self.patched(run, "demo" if name.endswith("demo") else "--stdio")
                message, loaded = done.stderr.splitlines()
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertEqual(message, f"{NEEDED}3.10.13 ({sys.executable})")
                # Nothing of the project but the entry itself is left loaded: serve.py's check ran
                # first, and its own half-done import was undone as the exit unwound it.
                modules = ast.literal_eval(loaded.removeprefix("loaded: "))
                self.assertEqual([module for module in modules if module not in (*allowed, "__main__")], [])

    def test_the_refusal_carries_the_prefix_every_other_line_does(self) -> None:
        self.assertTrue(NEEDED.startswith(serve.LOG_PREFIX + ": "))


PROJECT_MODULES = {name[:-3] for name in os.listdir(support.CODE) if name.endswith(".py")} | {"notes_mcp"}


def resolved(argv: list[str], config: dict[str, Any] | None = None) -> settings.Settings:
    """The Settings of `argv` over `config` (the lesson's without one), with a key and a token in the environment."""
    environ = {"NOTES_MCP_SECRET": support.KEY.hex(), "NOTES_MCP_TOKEN": procs.TOKEN}
    config = configuration.lesson_config() if config is None else config
    return settings.resolve(serve.parser().parse_args(argv), config, environ, os.getcwd(), lambda line: None)


def refused_start(*argv: str, environ: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """serve.start(argv) in this process, expected to refuse: (its exit status, its stderr lines)."""
    err = io.StringIO()
    with (
        contextlib.redirect_stderr(err),
        mock.patch.dict(os.environ, environ if environ is not None else {}, clear=environ is not None),
    ):
        try:
            built = serve.start(list(argv), prog="notes-mcp")
        except serve.StartupRefused as refused:
            return refused.status, err.getvalue().splitlines()
    built.close()
    return 0, err.getvalue().splitlines()


class CommandLineMistakeTests(unittest.TestCase):
    """A mistyped option gets one line naming the nearest real one; argparse's other errors are one line too."""

    def test_a_mistyped_option_gets_one_line_suggesting_the_nearest_and_exit_2(self) -> None:
        for typed, expected in (
            ("--stdoi", "--stdio"),
            ("--htpp", "--http"),
            ("--notes-dri", "--notes-dir"),
            ("--confirm-in-browsr", "--confirm-in-browser"),
        ):
            with self.subTest(typed=typed):
                status, lines = refused_start(typed, "x")
                self.assertEqual(status, serve.EXIT_USAGE)
                self.assertEqual(
                    lines,
                    [
                        f"{serve.LOG_PREFIX}: unknown option {typed}: did you mean {expected}? (notes-mcp --help lists "
                        "every option)"
                    ],
                )

    def test_the_suggestion_comes_before_the_missing_mode_and_survives_a_value(self) -> None:
        status, lines = refused_start("--stdio", "--db=x.db", "--notes-tols=1")
        self.assertEqual(
            (status, lines),
            (
                serve.EXIT_USAGE,
                [
                    f"{serve.LOG_PREFIX}: unknown option --notes-tols:"
                    " did you mean --notes-tools? (notes-mcp --help lists every option)"
                ],
            ),
        )

    def test_an_option_like_nothing_known_is_named_without_a_guess(self) -> None:
        self.assertEqual(
            refused_start("--stdio", "--zzz")[1],
            [f"{serve.LOG_PREFIX}: unknown option --zzz (notes-mcp --help lists every option)"],
        )

    def test_other_usage_errors_are_one_prefixed_line_and_exit_2(self) -> None:
        for argv, message in (
            ([], "one of the arguments --stdio --http is required"),
            (["--http", "--port", "70000"], "argument --port: must be 0..65535"),
        ):
            with self.subTest(argv=argv):
                self.assertEqual(
                    refused_start(*argv),
                    (serve.EXIT_USAGE, [f"{serve.LOG_PREFIX}: {message} (notes-mcp --help lists every option)"]),
                )

    def test_abbreviations_values_and_negative_numbers_are_not_taken_for_unknown_options(self) -> None:
        command = serve.parser()
        self.assertTrue(command.parse_args(["--std"]).stdio)  # argparse's unique prefix, as before
        self.assertEqual(command.parse_args(["--stdio", "--notes-dir", "-"]).notes_dir, ["-"])
        self.assertIsNone(command.unknown_option(["--http", "--port", "-1", "--", "--anything"]))
        self.assertEqual(command.unknown_option(["--stdio", "--db", "x", "--nope=1"]), "--nope")

    def test_a_real_process_prints_the_suggestion_alone(self) -> None:
        done = subprocess.run(
            [*procs.python(), procs.SERVE, "--stdoi"],
            capture_output=True,
            text=True,
            timeout=procs.GUARD,
            env=procs.server_env(),
        )
        self.assertEqual(done.returncode, serve.EXIT_USAGE)
        self.assertEqual(
            done.stderr,
            f"{serve.LOG_PREFIX}: unknown option --stdoi: did you mean --stdio? (serve.py --help lists every option)\n",
        )
        self.assertEqual(done.stdout, "")


# One child runs these commands in turn, through serve.serve as the command line does, and after each
# says which modules are loaded by then: what a command imports is what every process of its kind pays.
# Each list holds the modules loaded so far: the first three load nothing a mistake needs (difflib).
LOADING_COMMANDS = (
    ("help", ["--help"]),
    ("version", ["--version"]),
    ("refused flags", ["--stdio", "--no-auth"]),
    ("mistake", ["--stdoi"]),
    ("audit", ["audit", "--db", "{missing}", "list"]),
    ("stdio", ["--stdio"]),
)
# What a command line that has not parsed may load: the rules of its flags and of a config, the lesson.
BEFORE_PARSING = {"serve", "assemble", "config", "main", "settings", "stores"}
# Loaded by the pages, the transports and the server, never by the operator's audit command.
SERVING_ONLY = {"launch", "frame", "browser_confirm", "web_pages", "confirm_pages", "passkey_pages", "http_server",
                "streamable_http", "stdio_transport", "page_keeper", "sandbox", "socket"}  # fmt: skip


class WhatACommandLoadsTests(unittest.TestCase):
    """A command imports what its mode needs: every server process pays for each module it loads."""

    loaded: dict[str, set[str]]

    @classmethod
    def setUpClass(cls) -> None:
        folder = tempfile.TemporaryDirectory(prefix="loads-")
        cls.addClassCleanup(folder.cleanup)
        commands = [(name, [arg.format(missing=os.path.join(folder.name, "absent.db")) for arg in argv])
                    for name, argv in LOADING_COMMANDS]  # fmt: skip
        script = (
            "import json, sys\n"
            f"sys.path.insert(0, {support.CODE!r})\n"
            "import serve\n"
            "loaded = {}\n"
            f"for name, argv in {commands!r}:\n"
            "    serve.serve(argv)\n"
            "    loaded[name] = sorted(sys.modules)\n"
            "print('loaded:', json.dumps(loaded), file=sys.stderr)\n"
        )
        done = subprocess.run(
            [*procs.python(), "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True,
            env=procs.server_env(NOTES_MCP_SECRET=procs.SECRET), timeout=procs.GUARD, cwd=folder.name,
        )  # fmt: skip
        last = done.stderr.splitlines()[-1] if done.stderr else ""
        if not last.startswith("loaded: "):
            raise AssertionError(f"the child did not report what it loaded:\n{done.stderr}")
        cls.loaded = {name: set(modules) for name, modules in json.loads(last.removeprefix("loaded: ")).items()}

    def test_a_mistake_help_version_and_refused_flags_load_no_server_store_page_transport_or_sandbox(self) -> None:
        for name in ("help", "version", "refused flags", "mistake"):
            with self.subTest(command=name):
                self.assertEqual(self.loaded[name] & (PROJECT_MODULES - {"__main__"}), BEFORE_PARSING)
                self.assertEqual(self.loaded[name] & {"socket", "sqlite3", "dataclasses"}, set())
        self.assertNotIn("difflib", self.loaded["refused flags"])  # only a mistake is compared with the options
        self.assertIn("difflib", self.loaded["mistake"])

    def test_the_audit_command_loads_no_page_transport_or_server(self) -> None:
        self.assertIn("audit_cli", self.loaded["audit"])
        self.assertEqual(self.loaded["audit"] & SERVING_ONLY, set())

    def test_stdio_without_pages_loads_no_socket_page_keeper_or_page(self) -> None:
        self.assertLessEqual({"launch", "frame", "browser_confirm", "stdio_transport", "sandbox"}, self.loaded["stdio"])
        for module in ("socket", "page_keeper", "web_pages", "confirm_pages", "passkey_pages"):
            with self.subTest(module=module):
                self.assertNotIn(module, self.loaded["stdio"])


class TokenHelpTests(unittest.TestCase):
    """--help names every flag that needs NOTES_MCP_TOKEN without --config, and no other."""

    def test_the_help_line_names_exactly_the_flags_that_refuse_to_start_without_a_token(self) -> None:
        environ = {"NOTES_MCP_SECRET": procs.SECRET, "PATH": os.environ.get("PATH", "")}
        flags = [
            option
            for action in serve.parser()._actions
            if action.nargs == 0 and action.const is True
            for option in action.option_strings
            if option not in ("--stdio", "--http", "--no-auth", "--conformance-fixtures")
        ]
        self.assertIn("--publish", flags)
        needing = set()
        for argv in (["--http"], *(["--stdio", flag] for flag in flags)):
            status, lines = refused_start(*argv, environ=environ)
            if status and any("NOTES_MCP_TOKEN: is required" in line for line in lines):
                needing.add(argv[-1])
        self.assertEqual(needing, {"--http", "--publish", "--confirm-in-browser"})
        (meaning,) = [text for name, text in serve.ENVIRONMENT if name == "NOTES_MCP_TOKEN"]
        self.assertEqual(set(re.findall(r"--[a-z-]+", meaning)) - {"--config"}, needing)


class PrefixedLogTests(Tree):
    """Every line a running server prints starts with `notes-mcp: `, from its start through its shutdown."""

    def test_an_http_server_prefixes_start_refusals_the_legacy_adapter_and_shutdown(self) -> None:
        server = procs.HttpServer(self, "--notes-dir", self.notes, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        self.assertTrue(server.wait_for_line("sandbox:"))
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        status, _, _ = procs.post(
            server.connect(self), message, procs.mcp_headers(message, token="wrong-token-0123456789abcdef")
        )
        self.assertEqual(status, 401)  # a refusal, logged
        server.proc.terminate()
        self.assertEqual(server.wait(), 0)
        lines = server.stderr_lines
        # How many requests are in flight depends on when the refused connection's close is seen.
        self.assertEqual([re.sub(r"\d+ request", "N request", line) for line in lines if "shutting down" in line],
                         [f"{serve.LOG_PREFIX}: shutting down: stopped accepting; N request(s) in flight"])  # fmt: skip
        self.assertTrue(any("refused HTTP 401" in line for line in lines), lines)
        self.assertEqual([line for line in lines if not line.startswith(serve.LOG_PREFIX + ": ")], [])

    def test_a_stdio_server_prefixes_the_legacy_adapters_lines(self) -> None:
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        idless = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "notes_delete", "arguments": {}}}
        done = subprocess.run(
            [*procs.python(), procs.SERVE, "--stdio", "--notes-dir", self.notes],
            input=f"{json.dumps(initialize)}\n{json.dumps(idless)}\n",
            capture_output=True,
            text=True,
            timeout=procs.GUARD,
            env=env(self.dir),
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(
            any("legacy: ignored id-less request" in line for line in done.stderr.splitlines()), done.stderr
        )
        self.assertEqual(
            [line for line in done.stderr.splitlines() if not line.startswith(serve.LOG_PREFIX + ": ")], []
        )


class AuditRestoreMissingEntryTests(Tree):
    """`audit restore N` for an id with no entry says that it does not exist."""

    def audit(self, *argv: str) -> subprocess.CompletedProcess[str]:
        argv = (*procs.python(), procs.SERVE, "audit", *argv)
        environment = env(self.dir)
        return subprocess.run(argv, capture_output=True, text=True, timeout=procs.GUARD, env=environment, cwd=self.dir)

    def create(self, *store: str) -> None:
        """Build the server over `store` in this process and close it, as a start-up would: its database exists,
        with an empty audit."""
        with contextlib.redirect_stderr(io.StringIO()), mock.patch.dict(os.environ, env(self.dir), clear=True):
            serve.start(["--stdio", *store]).close()

    def test_a_missing_entry_is_named_as_missing_in_sqlite_and_in_a_folders_database(self) -> None:
        for store in (["--db", os.path.join(self.dir, "notes.db")], ["--notes-dir", self.notes]):
            with self.subTest(store=store[0]):
                self.create(*store)
                done = self.audit(*store, "restore", "99")
                self.assertEqual(done.stdout, "refused: entry 99 does not exist (audit list shows every entry)\n")
                self.assertEqual(done.returncode, 1)  # audit_cli.EXIT_REFUSED
                self.assertEqual(self.audit(*store, "list", "--json").stdout, "")  # nothing was recorded

    def test_an_entry_that_exists_but_is_no_deletion_keeps_the_stores_reason(self) -> None:
        import audit_cli

        class Store:
            def restore(self, entry_id: int) -> None:
                raise stores.StoreRefused(f"entry {entry_id} has no note in the trash")

            def audit_entries(self) -> list[dict[str, Any]]:
                return [{"id": 7}]

        out: list[str] = []
        for entry, expected in (
            (7, "refused: entry 7 has no note in the trash"),
            (8, "refused: entry 8 does not exist (audit list shows every entry)"),
        ):
            args = audit_cli.parser("t").parse_args(["restore", str(entry)])
            # The fake has only what `restore` reads.
            self.assertEqual(audit_cli.run(cast(stores.Store, Store()), args, out.append), audit_cli.EXIT_REFUSED)
            self.assertEqual(out[-1], expected)


class StopBeforeServingTests(unittest.TestCase):
    """A stop that lands between the URL line and the event loop (a SIGTERM right after start-up) ends the server
    cleanly."""

    def test_a_shutdown_before_serve_forever_makes_it_return_at_once_with_its_sockets_closed(self) -> None:
        import http_server

        server = http_server.HttpServer(lambda request: http_server.Response(200, [], b""), "127.0.0.1", 0)
        port = server.address[1]
        server.shutdown()
        server.serve_forever()  # returned: no loop over a closed listener, no traceback
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=procs.GUARD).close()
