"""A relative `--db` is the working directory's: resolved at start-up, and the start-up report says which file and why.

Two instances share consumed confirmations only through one file: the same relative path
from the same folder (or one that leads to the same file from two) is one replay store; the
same relative path from two folders is two, and each instance's report names its own.
"""

from __future__ import annotations

import os
import unittest
from typing import Any

from helpers import (
    procs,  # noqa: E402
    support,  # noqa: F401  (first: it puts code/ on the import path)
)
from helpers.support import accept, call, tps  # noqa: E402

import main  # noqa: E402
import serve  # noqa: E402
from test_store_cli import DECLINE, CliCase, env  # noqa: E402

RELATIVE = "is relative: resolved against the working directory at start-up"


class RelativeDbTests(CliCase):
    def instance(self, cwd: str, db: str) -> procs.StdioServer:
        return procs.StdioServer(self, "--db", db, env=env(self.dir, NOTES_MCP_TOKEN=procs.TOKEN), cwd=cwd)

    def folder(self, name: str) -> str:
        path = os.path.join(self.dir, name)
        os.makedirs(path)
        return path

    def reported(self, server: procs.StdioServer) -> str:
        """The report's line naming where consumed confirmations are kept."""
        self.assertTrue(server.wait_for_line("consumed confirmations: "), server.stderr_text())
        (line,) = [line for line in server.stderr_lines if "consumed confirmations: " in line]
        return line

    def declined_on_a_then_accepted_on_b(self, a: procs.StdioServer, b: procs.StdioServer) -> dict[str, Any]:
        first = a.exchange(call(tps()))["result"]
        declined = a.exchange(call(tps(), id=2, requestState=first["requestState"], inputResponses=DECLINE))
        self.assertEqual(declined["result"]["structuredContent"], {"deleted": False, "reason": "declined"})
        return b.exchange(call(tps(), id=3, requestState=first["requestState"], inputResponses=accept("note-14")))

    def stop(self, *servers: procs.StdioServer) -> None:
        for server in servers:
            server.close_stdin()
            self.assertEqual(server.wait(), 0)

    def test_one_relative_db_from_the_same_folder_is_one_replay_store_and_the_report_says_its_absolute_path(
        self,
    ) -> None:
        here = self.folder("a")
        a, b = self.instance(here, "notes.db"), self.instance(here, "notes.db")
        for server in (a, b):
            self.assertEqual(
                self.reported(server),
                f"{serve.LOG_PREFIX}: consumed confirmations: SQLite {os.path.join(here, 'notes.db')} "
                f"(--db notes.db {RELATIVE}; instances share confirmations only when they name this same file, "
                "so give hosts the absolute path)",
            )
        accepted = self.declined_on_a_then_accepted_on_b(a, b)
        self.assertEqual(accepted["error"]["code"], main.INVALID_PARAMS)  # declined on a: refused on b
        self.stop(a, b)

    def test_one_relative_db_from_two_folders_is_two_files_and_each_report_names_its_own(self) -> None:
        here, there = self.folder("a"), self.folder("b")
        a, b = self.instance(here, "notes.db"), self.instance(there, "notes.db")
        lines = [self.reported(a), self.reported(b)]
        self.assertIn(f"SQLite {os.path.join(here, 'notes.db')} (--db notes.db {RELATIVE}", lines[0])
        self.assertIn(f"SQLite {os.path.join(there, 'notes.db')} (--db notes.db {RELATIVE}", lines[1])
        self.stop(a, b)

    def test_relative_paths_that_lead_to_one_file_from_two_folders_share_it(self) -> None:
        here, there = self.folder("a"), self.folder("b")
        a, b = self.instance(here, "../shared.db"), self.instance(there, "../shared.db")
        for server in (a, b):
            self.assertIn(
                f"SQLite {os.path.join(self.dir, 'shared.db')} (--db ../shared.db {RELATIVE}", self.reported(server)
            )
        accepted = self.declined_on_a_then_accepted_on_b(a, b)
        self.assertEqual(accepted["error"]["code"], main.INVALID_PARAMS)
        self.stop(a, b)
        self.assertEqual((os.listdir(here), os.listdir(there)), ([], []))

    def test_an_absolute_db_is_reported_as_it_is_with_no_word_about_the_working_directory(self) -> None:
        server = self.instance(self.folder("a"), self.db)
        self.assertEqual(self.reported(server), f"{serve.LOG_PREFIX}: consumed confirmations: SQLite {self.db}")
        self.stop(server)


if __name__ == "__main__":
    unittest.main()
