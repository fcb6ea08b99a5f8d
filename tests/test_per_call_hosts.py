"""Hosts that start a server process for each call over stdio (mcporter, llama-index, the Inspector CLI).

Each call here is a new `serve.py --stdio --confirm-in-browser` process on one shared
SQLite file, ended (stdin closed) once it has answered, as those hosts do. The link the
first process returned must still open after it exited, be the same link on every later
call, and the decision made there must reach the process that makes the second call. The
page keeper (code/page_keeper.py) that serves it must end once its links are decided or
expired: the tests stop it at cleanup and wait on its pidfd to see it gone.
"""

from __future__ import annotations

import calendar
import http.client
import os
import tempfile
import time
import unittest
from typing import Any
from urllib.parse import urlsplit

from helpers import (
    procs,  # noqa: E402
    support,  # first: it puts code/ on the import path
    webdriver,  # noqa: E402
)
from helpers.support import tps  # noqa: E402

import browser_confirm  # noqa: E402
import main  # noqa: E402
import page_keeper  # noqa: E402
import sqlite_store  # noqa: E402
import stores  # noqa: E402
from test_browser_confirm import ALICE_TOKEN, config_file, notes  # noqa: E402

load_tests = webdriver.load_tests_for(__file__)  # the run's one browser is kept open for this module's tests
NO_FORM: dict[str, Any] = {}


class PerCallHost:
    """A host that starts a new stdio server for every tools/call and ends it after the answer."""

    def __init__(self, test: unittest.TestCase, config: str, db: str, *flags: str) -> None:
        self.test, self.argv = test, ["--config", config, "--db", db, "--confirm-in-browser", *flags]
        self.processes: list[procs.StdioServer] = []

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Start a process, discover, call once, close its stdin and wait for it to exit; the response."""
        server = procs.StdioServer(self.test, *self.argv, env=procs.server_env())
        self.processes.append(server)
        server.exchange(support.request("server/discover", id=0))
        response = server.exchange(
            support.request("tools/call", {"name": name, "arguments": arguments}, id=1, capabilities=NO_FORM)
        )
        server.close_stdin()
        self.test.assertEqual(server.wait(), 0)  # the host ended it: the process is gone before the next call
        return response


def fetch(url: str) -> int:
    """GET `url` with a fresh connection: the status (the page of a link, or a refusal)."""
    parts = urlsplit(url)
    assert parts.hostname is not None  # the server's own absolute links
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=procs.GUARD)
    try:
        connection.request("GET", parts.path)
        return connection.getresponse().status
    finally:
        connection.close()


class PerCallStdioTests(unittest.TestCase):
    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.db = os.path.join(folder.name, "notes.db")

    def note_ids(self) -> list[str]:
        store = sqlite_store.open_store(self.db, clock=time.time)
        try:
            return sorted(note.id for note in store.all())
        finally:
            store.close()

    def test_a_link_outlives_its_process_names_one_port_on_every_call_and_its_keeper_ends_at_the_expiry(self) -> None:
        ttl = 8.0  # long enough for two process starts on a loaded machine; the keeper's life is bounded by it
        host = PerCallHost(self, config_file(self, stateTtlSeconds=ttl), self.db)
        first = host.call(main.TOOL_NAME, tps())["result"]["structuredContent"]
        keeper = host.processes[0].keeper_pid()
        self.assertIsNotNone(keeper)
        self.assertEqual(fetch(first["url"]), 200)  # the first process has exited: its keeper answers the link
        pending = host.call(main.TOOL_NAME, {**tps(), "confirmation": first["confirmation"]})["result"][
            "structuredContent"
        ]
        self.assertEqual((pending["url"], pending["status"]), (first["url"], browser_confirm.STILL_PENDING))
        self.assertTrue(procs.keeper_ended(host.processes[1].keeper_pid() or 0, procs.GUARD))  # it gave out no link
        assert keeper is not None
        self.assertTrue(procs.keeper_ended(keeper, procs.GUARD))  # undecided, it ends at the expiry...
        self.assertGreaterEqual(
            time.time(), calendar.timegm(time.strptime(first["expiresAt"], "%Y-%m-%dT%H:%M:%SZ"))
        )  # ...not before
        with self.assertRaises(ConnectionRefusedError):
            fetch(first["url"])
        self.assertEqual(self.note_ids(), sorted(note.id for note in notes()))

    def test_without_a_shared_database_the_link_lives_with_its_process_and_the_next_process_refuses_the_token(
        self,
    ) -> None:
        config = config_file(self)
        first_process = procs.StdioServer(self, "--config", config, "--confirm-in-browser", env=procs.server_env())
        first = first_process.exchange(
            support.request("tools/call", {"name": main.TOOL_NAME, "arguments": tps()}, id=1, capabilities=NO_FORM)
        )
        first_process.close_stdin()
        self.assertEqual(first_process.wait(), 0)
        self.assertIsNone(first_process.keeper_pid())
        self.assertIn("links live as long as this process", first_process.stderr_text())
        token = first["result"]["structuredContent"]["confirmation"]
        second_process = procs.StdioServer(self, "--config", config, "--confirm-in-browser", env=procs.server_env())
        second = second_process.exchange(
            support.request(
                "tools/call",
                {"name": main.TOOL_NAME, "arguments": {**tps(), "confirmation": token}},
                id=1,
                capabilities=NO_FORM,
            )
        )
        self.assertEqual(second["error"]["message"], browser_confirm.refused_confirmation(main.TOOL_NAME))


class KeeperLifetimeTests(unittest.TestCase):
    """keep_until_done in process, with an injected clock: the keeper's life is bounded by its links' expiry."""

    def setUp(self) -> None:
        self.clock = support.Clock()
        self.records = stores.MemoryConfirmations(self.clock)
        self.waits: list[float] = []

    def link(self, handle: str, ttl: float) -> float:
        expires = self.clock() + ttl
        self.records.open(browser_confirm.Record(handle, f"nonce-{handle}", "alice", support.WORKSPACE, "TPS", expires))
        return expires

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.now += seconds

    def test_undecided_links_keep_it_until_the_last_expiry_and_not_a_moment_longer(self) -> None:
        links = {"a": self.link("a", 3.0), "b": self.link("b", 12.0)}
        page_keeper.keep_until_done(self.records, links, self.clock, self.wait)
        self.assertEqual(self.clock(), links["b"])
        self.assertTrue(all(seconds <= page_keeper.RECHECK_SECONDS for seconds in self.waits))

    def test_once_every_link_is_decided_it_ends_at_the_next_look(self) -> None:
        links = {"a": self.link("a", 300.0)}
        self.records.decide("a", "alice", browser_confirm.DECLINED, None, None)
        page_keeper.keep_until_done(self.records, links, self.clock, self.wait)
        self.assertEqual(self.waits, [])

    def test_the_keepers_pages_see_only_its_own_links(self) -> None:
        self.link("mine", 60.0)
        self.link("other", 60.0)
        kept = page_keeper.OnlyThese(self.records, {"mine"})
        self.assertIsNotNone(kept.by_handle("mine"))
        self.assertIsNone(kept.by_handle("other"))
        self.assertFalse(kept.decide("other", "alice", browser_confirm.APPROVED, "n", "v"))
        self.assertEqual(self.records.by_handle("other").status, browser_confirm.PENDING)  # type: ignore[union-attr]
        self.assertTrue(kept.decide("mine", "alice", browser_confirm.DECLINED, None, None))

    def test_it_remembers_at_most_max_links_the_newest_kept(self) -> None:
        read, write = os.pipe()
        lines = "".join(f"h{k} {1000.0 + k}\n" for k in range(page_keeper.MAX_LINKS + 5)) + "garbled\n"
        os.write(write, lines.encode("ascii"))
        os.close(write)
        links = page_keeper.read_links(read)
        self.assertEqual(len(links), page_keeper.MAX_LINKS)
        self.assertNotIn("h0", links)
        self.assertEqual(links[f"h{page_keeper.MAX_LINKS + 4}"], 1000.0 + page_keeper.MAX_LINKS + 4)


class PerCallInChromiumTests(unittest.TestCase):
    """The person approves in Chromium after the process that gave the link has exited; another process deletes."""

    @classmethod
    def setUpClass(cls) -> None:
        if not webdriver.available():
            raise unittest.SkipTest("Chromium or chromedriver not installed (run .ci/setup-chromium.sh)")
        super().setUpClass()

    def test_a_per_call_host_deletes_once_the_person_approved_in_chromium_after_the_first_process_exited(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        db = os.path.join(folder.name, "notes.db")
        host = PerCallHost(self, config_file(self), db)
        first = host.call(main.TOOL_NAME, tps("TPS report"))["result"]["structuredContent"]
        keeper = host.processes[0].keeper_pid()
        assert keeper is not None
        second = {**tps("TPS report"), "confirmation": first["confirmation"]}
        self.assertEqual(
            host.call(main.TOOL_NAME, second)["result"]["structuredContent"]["url"], first["url"]
        )  # pending: same link
        driver = webdriver.shared(self)
        driver.get(first["url"])  # every process that answered has exited by now
        self.assertIn("Sign in", driver.source())
        driver.paste("input[name=token]", ALICE_TOKEN)
        driver.submit("form button[type=submit]")
        driver.click("input[value$=':note-7']")
        driver.submit("button[value=approve]")
        self.assertIn("<h1>Approved</h1>", driver.source())
        done = host.call(main.TOOL_NAME, second)["result"]
        self.assertEqual(done["structuredContent"], {"deleted": True, "noteId": "note-7"})
        again = host.call(main.TOOL_NAME, second)
        self.assertEqual(again["error"]["message"], browser_confirm.refused_confirmation(main.TOOL_NAME))
        self.assertTrue(procs.keeper_ended(keeper, procs.GUARD))  # nothing left pending: the keeper is gone
        store = sqlite_store.open_store(db, clock=time.time)
        self.addCleanup(store.close)
        self.assertEqual(sorted(n.id for n in store.all()), sorted(n.id for n in notes() if n.id != "note-7"))


if __name__ == "__main__":
    unittest.main()
