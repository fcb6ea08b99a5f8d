"""The store contract: every store answers the seam's calls alike, each behaviour written once and run on four stores.

StoreContract holds the behaviours; one subclass per store says how to open it and how
another actor edits or removes a note there (a row for memory, SQLite and PostgreSQL, a
file for the Markdown folders).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest
from typing import Any

from helpers import store_workers
from helpers.sql_stores import SCRATCH, new_database
from helpers.support import KEY, PRINCIPAL, WORKSPACE, Clock, ContractCase, answered, call

import audit
import folder_paths
import frame
import main
import markdown_store
import postgres_store
import sqlite_store
import stores

TTL = main.DEFAULT_STATE_TTL_SECONDS
OTHER_PRINCIPAL = "bob"
ALWAYS = lambda note: True  # noqa: E731 - a recheck that accepts every live note
NEVER = lambda note: False  # noqa: E731 - a recheck that refuses (grant revoked, note moved)
BOUND = 2  # the replay bound the bound tests open their store with


def contract_notes() -> list[main.Note]:
    """Notes inside the workspace, one in a look-alike folder, one outside; titles out of order."""
    return [
        main.Note("n-b", "be\u0301ta report", f"{WORKSPACE}/b.md"),  # stored decomposed (NFD), as macOS writes names
        main.Note("n-a2", "Alpha report", f"{WORKSPACE}/sub/a2.md"),
        main.Note("n-a1", "alpha report", f"{WORKSPACE}/a1.md"),
        main.Note("evil", "alpha report", f"{WORKSPACE}-evil/a.md"),
        main.Note("outside", "alpha report", "file:///Users/alice/Other/a.md"),
    ]


class StoreContract(ContractCase):
    """Mixed into a TestCase per store; the subclass says how to open one and how notes change behind it."""

    workspace_uri = WORKSPACE

    def open_store(self, clock: Clock, max_per_principal: int = main.MAX_REPLAY_PER_PRINCIPAL) -> Any:
        raise NotImplementedError

    # ---------------------------------------------------------------- what differs per store (rows here)

    def notes(self, store: Any = None) -> list[main.Note]:
        """Every note the store holds, as it would show them."""
        return list((store or self.store).all())

    def store_id(self, name: str) -> str:
        """The store's id of the contract note `name` (contract_notes())."""
        return name

    def offered_in_a_note(self, workspace: main.Path, title: str) -> list[main.Note]:
        """What a lookup in a workspace that names a note (not a folder) offers."""
        return self.store.candidates(workspace, title)

    def write(self, name: str, title: str) -> None:
        """Another actor adds the note `name` with `title` inside the workspace."""
        self.store.put(main.Note(name, title, f"{self.workspace_uri}/{name}.md"))

    def edit(self, name: str) -> None:
        """Another actor changes the note `name`: same place and title, another version."""
        live = {note.id: note for note in self.notes()}[self.store_id(name)]
        self.store.put(main.Note(live.id, live.title, live.uri, live.revision + 1))

    def remove(self, name: str) -> None:
        """Another actor removes the note `name`."""
        self.store.remove(self.store_id(name))

    def shown(self, title: str) -> str:
        """A stored title as the store shows it."""
        return stores.blank_controls(title)

    # ---------------------------------------------------------------- helpers

    def setUp(self) -> None:
        self.clock = Clock()
        self.store = self.open_store(self.clock)
        self.workspace = main.parse_file_uri(self.workspace_uri)

    def step(
        self, principal: str, nonce: str, expires_at: float, target: tuple[str, str] | None, recheck: Any = ALWAYS
    ) -> main.Settlement:
        return self.store.consume(principal, nonce, expires_at, target, recheck)

    def target(self, name: str, store: Any = None) -> tuple[str, str]:
        live = {note.id: note for note in self.notes(store)}[self.store_id(name)]
        return (live.id, live.version)

    def ids(self, store: Any = None) -> list[str]:
        """The contract names of the notes the store holds, sorted."""
        names = {self.store_id(name): name for name in [n.id for n in contract_notes()] + ["bidi"]}
        return sorted(names[note.id] for note in self.notes(store))

    def found(self, workspace: main.Path, title: str) -> list[str]:
        """The contract names of the candidates, in the store's order."""
        names = {self.store_id(name): name for name in [n.id for n in contract_notes()] + ["bidi"]}
        return [names[note.id] for note in self.store.candidates(workspace, title)]

    def expiry(self) -> float:
        return self.clock.now + TTL

    # ---------------------------------------------------------------- what the form says

    keeps_a_trash = True  # the product's stores move a deleted note to the trash by default

    def test_the_products_notes_delete_over_this_store_is_the_lessons_handler(self) -> None:
        policy = main.AuthorizationPolicy({PRINCIPAL: [self.workspace_uri]})
        server = frame.notes_server(
            keys=[KEY], notes=self.store, policy=policy, clock=self.clock, log=lambda line: None
        )
        tool = server.tools[main.TOOL_NAME]
        self.assertIs(type(tool), main.NotesDelete)  # the lesson's class itself, not a copy or a subclass
        self.assertIs(tool.services, server.services)
        self.assertIs(server.services.notes, self.store)
        self.assertIs(server.services.replay, self.store)  # the store holds the nonces and runs the atomic step

    def test_the_form_says_what_a_deletion_does_in_this_store(self) -> None:
        policy = main.AuthorizationPolicy({PRINCIPAL: [self.workspace_uri]})
        server = frame.notes_server(
            keys=[KEY], notes=self.store, policy=policy, clock=self.clock, log=lambda line: None
        )
        result = answered(server, call({"workspaceUri": self.workspace_uri, "title": "alpha"}), PRINCIPAL)["result"]
        form = result["inputRequests"][main.INPUT_KEY]["params"]
        said = form["message"] + form["requestedSchema"]["properties"][main.CONFIRM_FIELD]["description"]
        self.assertIn(self.store.deletion, form["message"])
        if self.keeps_a_trash:
            self.assertIn("moved to the trash", said)
            self.assertIn(f"{audit.DEFAULT_TRASH_DAYS:g} days", said)
            self.assertNotIn("cannot be undone", said)
        else:
            self.assertIn("cannot be undone", said)
            self.assertNotIn("trash", said)

    # ---------------------------------------------------------------- lookups

    def test_candidates_are_strictly_inside_the_workspace_and_never_the_look_alike_folder(self) -> None:
        self.assertEqual(set(self.found(self.workspace, "alpha")), {"n-a1", "n-a2"})
        self.assertIn("evil", self.ids())  # present in the store, just never offered
        self.assertEqual(self.offered_in_a_note(main.parse_file_uri(f"{self.workspace_uri}/a1.md"), "alpha"), [])

    def test_candidates_come_in_form_order_title_casefolded_then_id(self) -> None:
        self.assertEqual(self.found(self.workspace, "REPORT"), ["n-a1", "n-a2", "n-b"])

    def test_a_title_stored_decomposed_is_found_by_the_composed_query_and_the_other_way(self) -> None:
        self.assertEqual(self.found(self.workspace, "B\u00c9TA"), ["n-b"])
        self.assertEqual(self.found(self.workspace, "be\u0301ta"), ["n-b"])
        self.assertEqual(self.store.candidates(self.workspace, "beta"), [])  # the accent still counts

    def test_control_and_format_characters_in_a_stored_title_are_blanked_where_it_is_shown(self) -> None:
        # Written by another actor straight into the store: a bidi override makes
        # "\u202egnp.exe plan" render as "nalp exe.png", an escape sequence repaints a terminal.
        raw = "\u202egnp.exe plan\u200f\x1b[2J\x07"
        self.write("bidi", raw)
        (found,) = self.store.candidates(self.workspace, "gnp.exe plan")
        self.assertEqual(found.id, self.store_id("bidi"))
        self.assertEqual(found.title, self.shown(raw))
        self.assertIn("gnp.exe plan  [2J", found.title)
        self.assertTrue(found.title.isprintable())
        self.assertEqual({note.id: note.title for note in self.notes()}[found.id], found.title)
        self.assertEqual(
            [n.title for n in self.store.candidates(self.workspace, "alpha")], ["alpha report", "Alpha report"]
        )  # others untouched

    # ---------------------------------------------------------------- the atomic step

    def test_an_accept_deletes_the_note_once_and_its_replay_is_used(self) -> None:
        target = self.target("n-b")
        self.assertIs(self.step(PRINCIPAL, "n1", self.expiry(), target), main.Settlement.DELETED)
        self.assertIs(self.step(PRINCIPAL, "n1", self.expiry(), target), main.Settlement.USED)
        self.assertEqual(self.ids(), ["evil", "n-a1", "n-a2", "outside"])
        self.assertTrue(self.store.is_consumed("n1"))

    def test_a_decline_consumes_the_nonce_and_deletes_nothing(self) -> None:
        self.assertFalse(self.store.is_consumed("n1"))
        self.assertIs(self.step(PRINCIPAL, "n1", self.expiry(), None), main.Settlement.CONSUMED)
        self.assertTrue(self.store.is_consumed("n1"))
        self.assertEqual(len(self.ids()), len(contract_notes()))

    def test_an_accept_replayed_after_a_decline_is_used_and_deletes_nothing(self) -> None:
        target = self.target("n-b")
        self.assertIs(self.step(PRINCIPAL, "n1", self.expiry(), None), main.Settlement.CONSUMED)
        self.assertIs(self.step(PRINCIPAL, "n1", self.expiry(), target), main.Settlement.USED)
        self.assertIn("n-b", self.ids())

    def test_a_changed_version_is_changed_with_the_nonce_consumed_and_the_note_kept(self) -> None:
        target = self.target("n-b")
        self.edit("n-b")
        self.assertIs(self.step(PRINCIPAL, "n1", self.expiry(), target), main.Settlement.CHANGED)
        self.assertIn("n-b", self.ids())
        self.assertTrue(self.store.is_consumed("n1"))

    def test_a_vanished_note_is_changed_with_the_nonce_consumed(self) -> None:
        target = self.target("n-b")
        self.remove("n-b")
        self.assertIs(self.step(PRINCIPAL, "n1", self.expiry(), target), main.Settlement.CHANGED)
        self.assertTrue(self.store.is_consumed("n1"))

    def test_a_failed_recheck_is_changed_with_the_nonce_consumed_and_the_note_kept(self) -> None:
        seen: list[str] = []

        def revoked(note: main.Note) -> bool:
            seen.append(note.id)
            return False

        self.assertIs(self.step(PRINCIPAL, "n1", self.expiry(), self.target("n-b"), revoked), main.Settlement.CHANGED)
        self.assertEqual(seen, [self.store_id("n-b")])  # it saw the live note
        self.assertIn("n-b", self.ids())
        self.assertTrue(self.store.is_consumed("n1"))

    def test_an_exception_in_the_recheck_rolls_back_the_claim(self) -> None:
        def broken(note: main.Note) -> bool:
            raise RuntimeError("policy backend down")

        with self.assertRaises(RuntimeError):
            self.step(PRINCIPAL, "n1", self.expiry(), self.target("n-b"), broken)
        self.assertFalse(self.store.is_consumed("n1"))
        self.assertIn("n-b", self.ids())
        self.assertIs(self.step(PRINCIPAL, "n1", self.expiry(), self.target("n-b")), main.Settlement.DELETED)

    def test_a_state_expired_at_the_step_is_used_and_claims_nothing(self) -> None:
        self.assertIs(self.step(PRINCIPAL, "n1", self.clock.now, self.target("n-b")), main.Settlement.USED)
        self.assertFalse(self.store.is_consumed("n1"))
        self.assertIs(self.step(PRINCIPAL, "n2", self.clock.now + 0.001, self.target("n-b")), main.Settlement.DELETED)

    # ---------------------------------------------------------------- the replay bound

    def test_the_replay_bound_is_full_past_the_limit_for_that_principal_only(self) -> None:
        store = self.open_store(self.clock, max_per_principal=BOUND)
        self.store = store
        for index in range(BOUND):  # at the limit: still accepted
            self.assertIs(self.step(PRINCIPAL, f"a{index}", self.expiry(), None), main.Settlement.CONSUMED)
        self.assertIs(self.step(PRINCIPAL, "over", self.expiry(), self.target("n-b")), main.Settlement.FULL)
        self.assertFalse(store.is_consumed("over"))
        self.assertIn("n-b", self.ids())
        self.assertIs(self.step(OTHER_PRINCIPAL, "b0", self.expiry(), None), main.Settlement.CONSUMED)

    def test_the_replay_bound_frees_up_when_the_held_confirmations_expire(self) -> None:
        store = self.open_store(self.clock, max_per_principal=BOUND)
        self.store = store
        for index in range(BOUND):
            self.step(PRINCIPAL, f"a{index}", self.clock.now + 1, None)
        self.clock.now += 1
        self.assertIs(self.step(PRINCIPAL, "later", self.expiry(), None), main.Settlement.CONSUMED)

    # ---------------------------------------------------------------- time

    def test_a_clock_stepped_back_cannot_revive_a_pruned_confirmation(self) -> None:
        expires = self.expiry()
        target = self.target("n-b")
        self.assertIs(self.step(PRINCIPAL, "n1", expires, None), main.Settlement.CONSUMED)  # the user declined
        self.clock.now = expires + 1  # past expiry: the next step prunes n1
        self.assertIs(self.step(PRINCIPAL, "other", self.expiry(), None), main.Settlement.CONSUMED)
        self.assertFalse(self.store.is_consumed("n1"))  # its record is gone
        self.clock.now = expires - TTL / 2  # NTP steps the clock back to before the expiry
        self.assertIs(self.step(PRINCIPAL, "n1", expires, target), main.Settlement.USED)
        self.assertIn("n-b", self.ids())
        self.assertFalse(self.store.is_consumed("n1"))


class MemoryContract(StoreContract, unittest.TestCase):
    keeps_a_trash = False  # a memory store forgets a deleted note

    def open_store(self, clock: Clock, max_per_principal: int = main.MAX_REPLAY_PER_PRINCIPAL) -> Any:
        return stores.MemoryStore(contract_notes(), main.MemoryReplayStore(clock, max_per_principal))


class SqliteContract(StoreContract, unittest.TestCase):
    def open_store(self, clock: Clock, max_per_principal: int = main.MAX_REPLAY_PER_PRINCIPAL) -> Any:
        folder = tempfile.mkdtemp(prefix="contract-", dir=SCRATCH)
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        store = sqlite_store.open_store(
            new_database(os.path.join(folder, "notes.db"), contract_notes()),
            clock=clock,
            max_per_principal=max_per_principal,
        )
        self.addCleanup(store.close)
        return store

    def test_with_deletion_unlink_the_form_says_a_deletion_cannot_be_undone(self) -> None:
        folder = tempfile.mkdtemp(prefix="contract-", dir=SCRATCH)
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        store = sqlite_store.open_store(
            os.path.join(folder, "notes.db"),
            clock=self.clock,
            seed_notes=contract_notes(),
            retention=audit.Retention(deletion="unlink"),
        )
        self.addCleanup(store.close)
        self.assertEqual(store.deletion, "Deletion cannot be undone.")


class FolderContract(StoreContract, unittest.TestCase):
    """The Markdown folder store: each contract note a file at its URI's path below one notes folder."""

    def open_store(self, clock: Clock, max_per_principal: int = main.MAX_REPLAY_PER_PRINCIPAL) -> Any:
        if not hasattr(self, "base"):  # one notes folder per test; each store gets its own confirmations database
            self.base = os.path.realpath(tempfile.mkdtemp(prefix="contract-folder-", dir=SCRATCH))
            self.state = tempfile.mkdtemp(prefix="contract-nonces-", dir=SCRATCH)
            for folder in (self.base, self.state):
                self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
            for note in contract_notes():
                self.put_file(self.path_of(note.uri), note.title)
            self.workspace_uri = main.format_file_uri(self.below(main.parse_file_uri(WORKSPACE)))
        database = new_database(os.path.join(self.state, f"nonces-{len(os.listdir(self.state))}.db"))
        nonces = sqlite_store.open_ledger(database, clock=clock, max_per_principal=max_per_principal)
        store = markdown_store.MarkdownNotesStore([self.base], nonces)
        self.addCleanup(store.close)
        return store

    def below(self, path: main.Path) -> main.Path:
        """`path` moved below this test's notes folder."""
        return tuple(p for p in self.base.split("/") if p) + path

    def path_of(self, uri: str) -> str:
        """The file that stands for the contract note at `uri`: its path, below this test's notes folder."""
        return "/" + "/".join(self.below(main.parse_file_uri(uri)))

    def put_file(self, path: str, title: str, body: str = "") -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(f"# {title}\n{body}")

    def notes(self, store: Any = None) -> list[main.Note]:
        return (store or self.store).candidates(self.below(()), "")  # every title contains ""

    def offered_in_a_note(self, workspace: main.Path, title: str) -> list[main.Note]:
        # Here the note is a file on disk: the lookup offers nothing and says what it is.
        with self.assertRaises(stores.StoreRefused) as caught:
            self.store.candidates(workspace, title)
        self.assertEqual(
            str(caught.exception), folder_paths.WORKSPACE_FILE.format(where=main.format_file_uri(workspace))
        )
        return []

    def store_id(self, name: str) -> str:
        uri = {note.id: note.uri for note in contract_notes()}.get(name, f"{WORKSPACE}/{name}.md")
        return "/".join(main.parse_file_uri(uri))

    def write(self, name: str, title: str) -> None:
        self.put_file(self.path_of(f"{WORKSPACE}/{name}.md"), title)

    def edit(self, name: str) -> None:
        note = {n.id: n for n in contract_notes()}[name]
        self.put_file(self.path_of(note.uri), note.title, "edited\n")

    def remove(self, name: str) -> None:
        os.unlink(self.path_of({n.id: n.uri for n in contract_notes()}[name]))

    def shown(self, title: str) -> str:
        return stores.blank_controls(title).strip()  # a heading's surrounding blanks are not part of it


PG = store_workers.OptionalCluster()
setUpModule, tearDownModule = PG.start, PG.stop  # only the PostgreSQL class skips; SQLite still runs


class PostgresContract(StoreContract, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        PG.require()

    def open_store(self, clock: Clock, max_per_principal: int = main.MAX_REPLAY_PER_PRINCIPAL) -> Any:
        store = postgres_store.open_store(
            PG.require().new_database(), clock=clock, seed_notes=contract_notes(), max_per_principal=max_per_principal
        )
        self.addCleanup(store.close)
        return store


class OptionalDependency(unittest.TestCase):
    def test_without_psycopg_opening_a_postgres_store_names_the_install_command_in_one_line(self) -> None:
        saved = postgres_store.psycopg
        postgres_store.psycopg = None  # type: ignore[assignment]  # as when the optional package is absent
        self.addCleanup(setattr, postgres_store, "psycopg", saved)
        with self.assertRaises(stores.StoreError) as caught:
            postgres_store.open_store("postgresql:///notes", clock=Clock())
        message = str(caught.exception)
        self.assertIn("pip install 'psycopg[binary]>=3.2'", message)
        self.assertIn("pip install '.[postgres]'", message)
        self.assertNotIn("\n", message)

    def test_a_password_in_the_url_is_never_part_of_an_operator_message(self) -> None:
        self.assertEqual(
            postgres_store.redact("postgresql://notes:s3cret@db.internal:5432/notes"),
            "postgresql://notes:***@db.internal:5432/notes",
        )
        self.assertEqual(postgres_store.redact("postgresql:///notes?host=/tmp"), "postgresql:///notes?host=/tmp")


if __name__ == "__main__":
    unittest.main()
