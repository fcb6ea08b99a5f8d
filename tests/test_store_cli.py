"""`serve --db` and `serve --notes-dir`: choosing the SQLite or Markdown store from the command line."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import tempfile
import unittest
from typing import Any

from helpers import procs, support
from helpers.support import accept, call, request, tps

import main
import serve
import stores

BOB_TOKEN = "bob-token-0123456789abcdef"
DECLINE = {main.INPUT_KEY: {"action": "decline"}}


def env(folder: str, **extra: str) -> dict[str, str]:
    """The shared signing key, a state folder inside the test's temporary tree, and `extra`."""
    return procs.server_env(NOTES_MCP_SECRET=procs.SECRET, XDG_STATE_HOME=os.path.join(folder, "state"), **extra)


def offered(result: dict[str, Any]) -> list[str]:
    schema = result["inputRequests"][main.INPUT_KEY]["params"]["requestedSchema"]
    return [option["const"] for option in schema["properties"]["note_id"]["oneOf"]]


def folder_uri(path: str) -> str:
    return main.format_file_uri(tuple(part for part in path.split("/") if part))


class CliCase(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="store-cli-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.db = os.path.join(self.dir, "notes.db")

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.db, timeout=procs.GUARD)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def refused(self, *args: str) -> str:
        """Run `serve` expecting exit 2; the one stderr line it printed."""
        # Without --config the lesson principal's token comes from the environment (no extra line).
        extra = {} if "--config" in args else {"NOTES_MCP_TOKEN": procs.TOKEN}
        proc = procs.Process(self, ["--stdio", *args], env(self.dir, **extra))
        self.assertEqual(proc.wait(), serve.EXIT_USAGE)
        self.assertEqual(len(proc.stderr_lines), 1, proc.stderr_lines)
        self.assertNotIn("Traceback", proc.stderr_text())
        return proc.stderr_lines[0]

    @staticmethod
    def http_call(
        server: procs.HttpServer, test: unittest.TestCase, message: dict[str, Any], token: str = procs.TOKEN
    ) -> dict[str, Any]:
        _, _, body = procs.post(server.connect(test), message, procs.mcp_headers(message, token))
        return json.loads(body)


class SqliteCliTests(CliCase):
    def test_db_creates_and_seeds_a_new_database_with_the_lesson_fixture(self) -> None:
        server = procs.StdioServer(self, "--db", self.db, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        first = server.exchange(call(tps()))["result"]
        self.assertEqual(offered(first), ["note-3", "note-7", "note-14"])
        done = server.exchange(call(tps(), id=2, requestState=first["requestState"], inputResponses=accept("note-14")))
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"})
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        left = {note_id for (note_id,) in self.rows("SELECT id FROM notes")}
        self.assertEqual(left, {note.id for note in main.lesson_notes()} - {"note-14"})
        self.assertEqual(len(self.rows("SELECT nonce FROM consumed_nonces")), 1)

    def test_the_start_up_report_says_in_one_line_which_indexes_serve_lookups(self) -> None:
        server = procs.StdioServer(self, "--db", self.db, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        self.assertEqual(offered(server.exchange(call(tps()))["result"]), ["note-3", "note-7", "note-14"])
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        lines = [line for line in server.stderr_lines if "notes store:" in line]
        self.assertEqual(len(lines), 1, server.stderr_lines)
        self.assertIn("workspace rows by URI index, titles by FTS5 trigram index", lines[0])

    def test_the_config_db_key_seeds_the_config_notes(self) -> None:
        config = procs.write_config(
            self,
            {
                "principals": {"alice": {"token": procs.TOKEN, "workspaces": [support.WORKSPACE]}},
                "notes": [{"id": "n1", "title": "TPS report from config", "uri": support.WORKSPACE + "/n1.md"}],
                "db": self.db,
            },
        )
        server = procs.StdioServer(self, "--config", config, env=env(self.dir))
        self.assertEqual(offered(server.exchange(call(tps()))["result"]), ["n1"])
        self.assertEqual(self.rows("SELECT id, title FROM notes"), [("n1", "TPS report from config")])

    def test_a_file_that_is_not_sqlite_exits_2_with_one_line_and_is_left_alone(self) -> None:
        with open(self.db, "wb") as handle:
            handle.write(b"not a database at all" * 100)
        line = self.refused("--db", self.db)
        self.assertIn("is not an SQLite database", line)
        with open(self.db, "rb") as handle:
            self.assertEqual(handle.read(), b"not a database at all" * 100)


class FolderStartUpTests(CliCase):
    def test_the_start_up_report_says_how_the_folder_index_learns_of_changes(self) -> None:
        folder = os.path.join(self.dir, "Notes")
        os.makedirs(folder)
        with open(os.path.join(folder, "tps.md"), "w", encoding="utf-8") as handle:
            handle.write("# TPS report\n")
        server = procs.StdioServer(
            self, "--notes-dir", folder, "--db", self.db, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN)
        )
        first = server.exchange(call(tps(workspace=folder_uri(os.path.realpath(folder)))))["result"]
        self.assertEqual(offered(first), ["tps.md"])
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        lines = [line for line in server.stderr_lines if "notes store:" in line]
        self.assertEqual(len(lines), 1, server.stderr_lines)
        self.assertIn(
            "title index kept per file, built at the first lookup; changes learnt from Linux inotify", lines[0]
        )


class ServingFaultTests(CliCase):
    """What the serving process does when its database is replaced, and when it is told to stop."""

    def test_a_replaced_database_refuses_the_change_logs_one_line_and_the_process_exits_1(self) -> None:
        server = procs.HttpServer(self, "--db", self.db, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        first = self.http_call(server, self, call(tps()))["result"]
        os.replace(self.db, self.db + ".moved")  # a restore or cleanup job moves the file away...
        sqlite3.connect(self.db).close()  # ...and something else creates a fresh one in its place
        retry = call(tps(), id=2, requestState=first["requestState"], inputResponses=accept("note-14"))
        result = self.http_call(server, self, retry)["result"]
        self.assertIs(result["isError"], True)
        self.assertIn("removed or replaced", result["content"][0]["text"])
        self.assertEqual(server.wait(), serve.EXIT_STORE_LOST)
        lost = [line for line in server.stderr_lines if "removed or replaced" in line]
        self.assertEqual(len(lost), 1, server.stderr_lines)
        self.assertNotIn("Traceback", server.stderr_text())
        moved = sqlite3.connect(self.db + ".moved")
        self.addCleanup(moved.close)
        self.assertIn(("note-14",), moved.execute("SELECT id FROM notes").fetchall())  # nothing deleted anywhere

    def test_a_replaced_database_met_by_a_note_tool_is_an_error_result_and_the_process_exits_1(self) -> None:
        server = procs.HttpServer(
            self, "--db", self.db, "--notes-tools", env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN)
        )
        search = request(
            "tools/call", {"name": "notes_search", "arguments": {"workspaceUri": main.LESSON_WORKSPACE, "query": "TPS"}}
        )
        self.assertIs(self.http_call(server, self, search)["result"]["isError"], False)
        os.replace(self.db, self.db + ".moved")
        sqlite3.connect(self.db).close()  # a fresh, empty database where the served one was
        arguments = {"workspaceUri": main.LESSON_WORKSPACE, "title": "Minutes", "body": "agreed\n"}
        result = self.http_call(
            server, self, request("tools/call", {"name": "notes_create", "arguments": arguments}, id=2)
        )["result"]
        self.assertIs(result["isError"], True)
        self.assertIn("removed or replaced", result["content"][0]["text"])
        self.assertEqual(server.wait(), serve.EXIT_STORE_LOST)
        self.assertEqual(
            len([line for line in server.stderr_lines if "removed or replaced" in line]), 1, server.stderr_lines
        )
        self.assertNotIn("Traceback", server.stderr_text())

    def test_a_removed_wal_file_refuses_the_change_and_the_process_exits_1(self) -> None:
        server = procs.HttpServer(self, "--db", self.db, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        first = self.http_call(server, self, call(tps()))["result"]
        os.unlink(self.db + "-wal")  # a cleanup job that thinks the side files are litter
        retry = call(tps(), id=2, requestState=first["requestState"], inputResponses=accept("note-14"))
        result = self.http_call(server, self, retry)["result"]
        self.assertIs(result["isError"], True)
        self.assertIn("removed or replaced", result["content"][0]["text"])
        self.assertEqual(server.wait(), serve.EXIT_STORE_LOST)
        self.assertEqual(
            len([line for line in server.stderr_lines if "removed or replaced" in line]), 1, server.stderr_lines
        )
        self.assertNotIn("Traceback", server.stderr_text())
        conn = sqlite3.connect(self.db)
        self.addCleanup(conn.close)
        self.assertIn(("note-14",), conn.execute("SELECT id FROM notes").fetchall())  # nothing deleted

    def test_a_truncated_shm_file_is_store_lost_and_exit_1_not_a_bus_error(self) -> None:
        server = procs.HttpServer(self, "--db", self.db, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        first = self.http_call(server, self, call(tps()))["result"]
        os.truncate(self.db + "-shm", 0)  # SQLite's memory map of it would fault on the next access
        retry = call(tps(), id=2, requestState=first["requestState"], inputResponses=accept("note-14"))
        result = self.http_call(server, self, retry)["result"]
        self.assertIs(result["isError"], True)
        self.assertEqual(server.wait(), serve.EXIT_STORE_LOST)  # not -SIGBUS
        self.assertNotIn("Traceback", server.stderr_text())
        conn = sqlite3.connect(self.db)
        self.addCleanup(conn.close)
        self.assertIn(("note-14",), conn.execute("SELECT id FROM notes").fetchall())

    def test_an_immutable_shm_file_is_store_lost_one_line_and_exit_1_not_a_bus_error(self) -> None:
        server = procs.HttpServer(self, "--db", self.db, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        first = self.http_call(server, self, call(tps()))["result"]
        shm = self.db + "-shm"
        made = subprocess.run(
            ["chattr", "+i", shm], capture_output=True, text=True
        )  # SQLite's next write to its map faults
        if made.returncode != 0:
            self.skipTest(
                f"chattr +i refused here (needs root and a file system with the flag): {made.stderr.strip()[:200]}"
            )
        self.addCleanup(subprocess.run, ["chattr", "-i", shm], capture_output=True)
        retry = call(tps(), id=2, requestState=first["requestState"], inputResponses=accept("note-14"))
        result = self.http_call(server, self, retry)["result"]
        self.assertIs(result["isError"], True)
        self.assertEqual(result["content"][0]["text"], stores.BROKEN)
        self.assertEqual(server.wait(), serve.EXIT_STORE_LOST)  # not -SIGBUS
        self.assertEqual(
            [line for line in server.stderr_lines if stores.BROKEN in line], [f"{serve.LOG_PREFIX}: {stores.BROKEN}"]
        )
        self.assertNotIn("Traceback", server.stderr_text())
        subprocess.run(["chattr", "-i", shm], check=True)
        self.assertIn(("note-14",), self.rows("SELECT id FROM notes"))  # nothing deleted

    def test_a_failed_write_is_a_retryable_refusal_and_the_same_accept_succeeds_once_writes_work(self) -> None:
        server = procs.HttpServer(self, "--db", self.db, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        first = self.http_call(server, self, call(tps()))["result"]
        retry = call(tps(), id=2, requestState=first["requestState"], inputResponses=accept("note-14"))
        # No file of the process may grow now: the next write to the log fails (EFBIG, an I/O error).
        limits = resource.prlimit(server.proc.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(server.proc.pid, resource.RLIMIT_FSIZE, (os.path.getsize(self.db + "-wal"), limits[1]))
        try:
            result = self.http_call(server, self, retry)["result"]
        finally:
            resource.prlimit(server.proc.pid, resource.RLIMIT_FSIZE, limits)
        self.assertIs(result["isError"], True)
        self.assertIn("could not be written; nothing was changed", result["content"][0]["text"])
        self.assertEqual(
            self.http_call(server, self, retry)["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"}
        )
        self.assertIsNone(server.proc.poll())  # still serving
        self.assertNotIn("Traceback", server.stderr_text())

    def test_sigterm_closes_the_store_so_the_database_file_alone_holds_every_deletion(self) -> None:
        server = procs.HttpServer(self, "--db", self.db, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        for index, note_id in enumerate(("note-3", "note-7", "note-14")):
            first = self.http_call(server, self, call(tps(), id=10 * index))["result"]
            retry = call(tps(), id=10 * index + 1, requestState=first["requestState"], inputResponses=accept(note_id))
            self.assertIs(self.http_call(server, self, retry)["result"]["isError"], False)
        server.proc.terminate()
        self.assertEqual(server.wait(), 0)
        self.assertFalse(os.path.exists(self.db + "-wal") and os.path.getsize(self.db + "-wal") > 0)
        copy = os.path.join(self.dir, "copy.db")
        with open(self.db, "rb") as source, open(copy, "wb") as target:
            target.write(source.read())  # the main file alone, as a naive backup takes it
        conn = sqlite3.connect(copy)
        self.addCleanup(conn.close)
        left = {note_id for (note_id,) in conn.execute("SELECT id FROM notes")}
        self.assertEqual(left & {"note-3", "note-7", "note-14"}, set())


class TwoInstanceTests(CliCase):
    """Two HTTP processes, one database, one signing key: a confirmation is used once overall."""

    a: procs.HttpServer
    b: procs.HttpServer
    pair_dir: str
    pair_db: str

    @classmethod
    def setUpClass(cls) -> None:
        # One pair for the class: one test deletes note-14, the other declines and then tries
        # note-7, so neither reads what the other changed, in either order.
        folder = tempfile.TemporaryDirectory(prefix="store-cli-")
        cls.addClassCleanup(folder.cleanup)
        cls.pair_dir = folder.name
        cls.pair_db = os.path.join(cls.pair_dir, "notes.db")
        scope: Any = procs.ClassScope(cls)
        cls.a = procs.HttpServer(scope, "--db", cls.pair_db, env=env(cls.pair_dir, NOTES_MCP_TOKEN=procs.TOKEN))
        cls.b = procs.HttpServer(scope, "--db", cls.pair_db, env=env(cls.pair_dir, NOTES_MCP_TOKEN=procs.TOKEN))

    def setUp(self) -> None:
        """The class's folder and pair (CliCase.setUp would give each test a folder of its own)."""
        self.dir, self.db = self.pair_dir, self.pair_db

    def test_a_form_from_a_completes_on_b_and_the_replay_on_a_is_refused(self) -> None:
        first = self.http_call(self.a, self, call(tps()))["result"]
        retry = call(tps(), id=2, requestState=first["requestState"], inputResponses=accept("note-14"))
        done = self.http_call(self.b, self, retry)
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"})
        replay = self.http_call(self.a, self, retry)
        self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(len(self.rows("SELECT id FROM notes")), len(main.lesson_notes()) - 1)

    def test_a_decline_on_b_makes_a_refuse_the_accept(self) -> None:
        first = self.http_call(self.a, self, call(tps()))["result"]
        declined = self.http_call(
            self.b, self, call(tps(), id=2, requestState=first["requestState"], inputResponses=DECLINE)
        )
        self.assertEqual(declined["result"]["structuredContent"], {"deleted": False, "reason": "declined"})
        accepted = self.http_call(
            self.a, self, call(tps(), id=3, requestState=first["requestState"], inputResponses=accept("note-7"))
        )
        self.assertEqual(accepted["error"]["code"], main.INVALID_PARAMS)
        self.assertIn(("note-7",), self.rows("SELECT id FROM notes"))


class RelativePathTests(CliCase):
    """A config's relative paths mean its own folder; a relative --db means the working directory, said at start-up."""

    def shared_config(self) -> tuple[str, str]:
        """config.json (mode 600) beside a notes folder, naming its db relatively; (path, its folder)."""
        folder = os.path.join(self.dir, "conf")
        os.makedirs(os.path.join(folder, "notes"))
        with open(os.path.join(folder, "notes", "tps.md"), "w", encoding="utf-8") as handle:
            handle.write("# TPS report\n")
        document = {
            "principals": {
                "alice": {"token": procs.TOKEN, "workspaces": [], "notesDirs": [os.path.join(folder, "notes")]}
            },
            "db": "nonces.db",
        }
        path = os.path.join(folder, "config.json")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
            json.dump(document, handle)
        return path, folder

    def working_directory(self, name: str) -> str:
        path = os.path.join(self.dir, name)
        os.mkdir(path)
        return path

    def test_two_instances_started_from_two_folders_share_one_config_s_replay_store(self) -> None:
        config, folder = self.shared_config()
        here, there = self.working_directory("a"), self.working_directory("b")
        a = procs.StdioServer(self, "--config", config, env=env(self.dir), cwd=here)
        b = procs.StdioServer(self, "--config", config, env=env(self.dir), cwd=there)
        args = {"workspaceUri": folder_uri(os.path.join(folder, "notes")), "title": "TPS"}
        first = a.exchange(call(args, id=1))["result"]
        self.assertEqual(offered(first), ["tps.md"])
        declined = a.exchange(call(args, id=2, requestState=first["requestState"], inputResponses=DECLINE))
        self.assertEqual(declined["result"]["structuredContent"], {"deleted": False, "reason": "declined"})
        accepted = b.exchange(call(args, id=3, requestState=first["requestState"], inputResponses=accept("tps.md")))
        self.assertEqual(accepted["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(os.listdir(os.path.join(folder, "notes")), ["tps.md"])  # nothing deleted, no trash made
        self.assertEqual((os.listdir(here), os.listdir(there)), ([], []))  # no store of its own in either
        for server in (a, b):
            self.assertTrue(
                server.wait_for_line(f"consumed confirmations: SQLite {os.path.join(folder, 'nonces.db')}"),
                server.stderr_text(),
            )
            server.close_stdin()
            self.assertEqual(server.wait(), 0)

    def test_a_relative_db_flag_is_the_working_directory_s_and_the_report_says_where(self) -> None:
        here = self.working_directory("a")
        server = procs.StdioServer(self, "--db", "notes.db", env=env(self.dir), cwd=here)
        self.assertTrue(server.wait_for_line("consumed confirmations: "), server.stderr_text())
        self.assertIn(
            f"{serve.LOG_PREFIX}: consumed confirmations: SQLite {os.path.join(here, 'notes.db')} (--db notes.db is "
            "relative",
            server.stderr_text(),
        )
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        # The database and, left by the sandbox that may not remove them, its -wal and -shm.
        self.assertEqual(sorted(name for name in os.listdir(here) if not name.endswith(("-wal", "-shm"))), ["notes.db"])

    def test_a_db_starting_with_a_tilde_is_refused_with_the_path_meant(self) -> None:
        line = self.refused("--db", "~/notes.db")
        self.assertIn("--db: ~/notes.db starts with ~", line)
        self.assertIn(os.path.expanduser("~/notes.db"), line)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "~")))


# What psycopg 3 raises at import when it finds no libpq (its pure-Python build loads the
# system's library), as a stand-in package that a test puts first on PYTHONPATH.
PSYCOPG_WITHOUT_LIBPQ = (
    "raise ImportError('no pq wrapper available.\\nAttempts made:\\n"
    "- couldn\\'t import psycopg \\'c\\' implementation: No module named \\'psycopg_c\\'\\n"
    "- couldn\\'t import psycopg \\'binary\\' implementation: No module named \\'psycopg_binary\\'\\n"
    "- couldn\\'t import psycopg \\'python\\' implementation: libpq library not found')\n"
)


class PostgresExtraTests(CliCase):
    """`--db postgresql://...` without what the [postgres] extra needs: one line saying what to install."""

    def test_psycopg_without_libpq_names_the_system_package_to_install(self) -> None:
        fake = os.path.join(self.dir, "site", "psycopg")
        os.makedirs(fake)
        with open(os.path.join(fake, "__init__.py"), "w", encoding="utf-8") as handle:
            handle.write(PSYCOPG_WITHOUT_LIBPQ)
        proc = procs.Process(
            self, ["--stdio", "--db", "postgresql:///notes"], env(self.dir, PYTHONPATH=os.path.dirname(fake))
        )
        self.assertEqual(proc.wait(), serve.EXIT_USAGE)
        (line,) = proc.stderr_lines
        for install in ("apt install libpq5", "dnf install libpq", "brew install libpq"):
            self.assertIn(install, line)
        self.assertNotIn("[postgres]", line)  # reinstalling the extra would not bring libpq
        self.assertNotIn("Traceback", proc.stderr_text())

    def test_without_psycopg_the_line_names_the_pip_command(self) -> None:
        # A stand-in first on PYTHONPATH fails the import as a missing package does, so the
        # absence shows even where psycopg is installed (CI installs it).
        fake = os.path.join(self.dir, "site", "psycopg")
        os.makedirs(fake)
        with open(os.path.join(fake, "__init__.py"), "w", encoding="utf-8") as handle:
            handle.write("raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n")
        proc = procs.Process(
            self,
            ["--stdio", "--db", "postgresql:///notes"],
            env(self.dir, PYTHONPATH=os.path.dirname(fake), NOTES_MCP_TOKEN=procs.TOKEN),
        )
        self.assertEqual(proc.wait(), serve.EXIT_USAGE)
        (line,) = proc.stderr_lines
        self.assertIn("pip install 'psycopg[binary]>=3.2'", line)
        self.assertNotIn("libpq5", line)
        self.assertNotIn("Traceback", proc.stderr_text())


class NotesDirCliTests(CliCase):
    def setUp(self) -> None:
        super().setUp()
        self.notes = os.path.join(self.dir, "Notes")
        os.makedirs(os.path.join(self.notes, "2025"))
        for rel, text in (
            ("2025/tps.md", "# TPS report 2025\n"),
            ("tps-2024.md", "# TPS report 2024\n"),
            ("list.md", "# Shopping\n"),
        ):
            with open(os.path.join(self.notes, rel), "w", encoding="utf-8") as handle:
                handle.write(text)

    def files(self, folder: str | None = None) -> set[str]:
        """Every file under the folder, the trash's apart."""
        root = folder or self.notes
        found = {os.path.relpath(os.path.join(d, f), root) for d, _, names in os.walk(root) for f in names}
        return {rel for rel in found if not rel.startswith(".trash/")}

    def trashed(self) -> list[str]:
        trash = os.path.join(self.notes, ".trash")
        return sorted(os.listdir(trash)) if os.path.isdir(trash) else []

    def test_notes_dir_over_stdio_deletes_exactly_the_chosen_file(self) -> None:
        server = procs.StdioServer(self, "--notes-dir", self.notes, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        args = tps(workspace=folder_uri(self.notes))
        first = server.exchange(call(args))["result"]
        self.assertEqual(offered(first), ["tps-2024.md", "2025/tps.md"])
        done = server.exchange(
            call(args, id=2, requestState=first["requestState"], inputResponses=accept("2025/tps.md"))
        )
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "2025/tps.md"})
        self.assertEqual(self.files(), {"tps-2024.md", "list.md"})
        self.assertTrue(len(self.trashed()) == 1 and self.trashed()[0].endswith("-tps.md"))
        replay = server.exchange(
            call(args, id=3, requestState=first["requestState"], inputResponses=accept("2025/tps.md"))
        )
        self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)
        # The confirmation was recorded in the default database under XDG_STATE_HOME.
        self.assertTrue(os.path.isfile(os.path.join(self.dir, "state", "notes-mcp", "nonces.db")))

    def test_the_lesson_workspace_is_not_served_from_the_fixture_when_folders_are_given(self) -> None:
        server = procs.StdioServer(self, "--notes-dir", self.notes, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN))
        self.assertTrue(server.exchange(call(tps()))["result"]["isError"])

    def test_config_notes_dirs_are_per_principal_and_use_the_config_db_for_confirmations(self) -> None:
        other = os.path.join(self.dir, "Bob")
        os.makedirs(other)
        with open(os.path.join(other, "tps.md"), "w", encoding="utf-8") as handle:
            handle.write("# TPS bob\n")
        config = procs.write_config(
            self,
            {
                "principals": {
                    "alice": {"token": procs.TOKEN, "workspaces": [], "notesDirs": [self.notes]},
                    "bob": {"token": BOB_TOKEN, "workspaces": [], "notesDirs": [other]},
                },
                "stdioPrincipal": "alice",
                "db": self.db,
            },
        )
        server = procs.HttpServer(self, "--config", config, env=env(self.dir))
        alice_args = tps(workspace=folder_uri(self.notes))
        refused = self.http_call(server, self, call(alice_args), token=BOB_TOKEN)["result"]
        self.assertTrue(refused["isError"])
        self.assertNotIn("requestState", refused)
        first = self.http_call(server, self, call(alice_args))["result"]
        retry = call(alice_args, id=2, requestState=first["requestState"], inputResponses=accept("tps-2024.md"))
        self.assertTrue(self.http_call(server, self, retry)["result"]["structuredContent"]["deleted"])
        self.assertEqual(self.files(), {"2025/tps.md", "list.md"})
        self.assertEqual(self.files(other), {"tps.md"})
        self.assertEqual(len(self.rows("SELECT nonce FROM consumed_nonces")), 1)
        self.assertEqual(self.rows("SELECT id FROM notes"), [])
        self.assertFalse(os.path.exists(os.path.join(self.dir, "state")))

    def test_a_missing_notes_folder_exits_2_with_one_line(self) -> None:
        self.assertIn("does not exist", self.refused("--notes-dir", os.path.join(self.dir, "absent")))

    def test_config_notes_and_notes_folders_together_exit_2(self) -> None:
        config = procs.write_config(
            self,
            {
                "principals": {"alice": {"token": procs.TOKEN, "workspaces": [], "notesDirs": [self.notes]}},
                "notes": [{"id": "n1", "title": "TPS", "uri": support.WORKSPACE + "/n1.md"}],
            },
        )
        self.assertIn("notes:", self.refused("--config", config))
        self.assertEqual(self.files(), {"2025/tps.md", "tps-2024.md", "list.md"})


if __name__ == "__main__":
    unittest.main()
