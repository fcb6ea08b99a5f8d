"""What the store tests share: where their files go, a new SQLite database to copy, the race notes, the worker's
consume command, and the tests both SQL stores must pass alike."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable
from typing import Any

from helpers import store_workers, support
from helpers.support import PRINCIPAL, WORKSPACE, ContractCase

import main
import sqlite_store

SCRATCH = support.SCRATCH  # the in-process store tests' folders: see tests/helpers/support.py

# (seed, sqlite_store.trigram_support()) -> a database open_store created so, made once: a test that
# patches the probe to say "no trigram tokenizer" gets a database without the title index, as from open_store.
_NEW_DATABASES: dict[tuple[tuple[main.Note, ...], str | None], bytes] = {}


def new_database(path: str, seed_notes: Iterable[main.Note] = ()) -> str:
    """`path`, where a copy of a new database as sqlite_store.open_store creates it with `seed_notes` is put unless a
    file is there already: for a test whose point is not the creation of the schema.

    Creating the schema costs some fifty statements, each parsed against the schema so far;
    opening the copy is the open of an existing database, about a third of that CPU. The
    copies share one store id, which only tells the database from another file put over it
    while it is open.
    """
    seed = tuple(seed_notes)
    key = (seed, sqlite_store.trigram_support())
    if key not in _NEW_DATABASES:
        with tempfile.TemporaryDirectory(prefix="new-db-", dir=SCRATCH) as folder:
            made = os.path.join(folder, "new.db")
            sqlite_store.open_store(made, clock=time.time, seed_notes=seed).close()
            with open(made, "rb") as handle:
                _NEW_DATABASES[key] = handle.read()
    try:
        with open(path, "xb") as handle:
            handle.write(_NEW_DATABASES[key])
    except FileExistsError:
        pass
    return path


def race_notes(count: int) -> list[main.Note]:
    """Notes race-000... inside the lesson workspace, one per race round."""
    return [main.Note(f"race-{i:03d}", f"Race {i:03d}", f"{WORKSPACE}/race-{i:03d}.md") for i in range(count)]


def consume_command(note: main.Note, nonce: str, pause: str | None = None) -> dict[str, Any]:
    """A worker's consume of `note` under `nonce` (store_workers), paused inside the transaction at `pause` if given."""
    return {
        "op": "consume",
        "principal": PRINCIPAL,
        "nonce": nonce,
        "expires_at": time.time() + 3600,
        "target": [note.id, note.version],
        "pause": pause,
    }


class SeedingContract(ContractCase):
    """Mixed into each SQL store's TestCase: a new database is seeded once, and never again.

    The subclass provides `module` (the store's module), `open(**kwargs)` (a store on this
    test's database, seeded with the lesson's notes unless told otherwise, closed at
    cleanup), `open_plain()` (open_store on it with the lesson's notes, not closed), and
    `note_ids()` and `schema_version()` read behind the store's back.
    """

    module: Any

    def test_a_new_database_records_its_schema_version_and_is_seeded(self) -> None:
        self.open()  # type: ignore[attr-defined]
        self.assertEqual(self.schema_version(), (str(self.module.SCHEMA_VERSION),))  # type: ignore[attr-defined]
        self.assertEqual(self.note_ids(), sorted(note.id for note in main.lesson_notes()))  # type: ignore[attr-defined]

    def test_an_existing_database_is_never_reseeded_even_when_empty(self) -> None:
        store = self.open()  # type: ignore[attr-defined]
        for note in store.all():
            store.remove(note.id)
        store.close()
        self.open(seed_notes=main.lesson_notes())  # type: ignore[attr-defined]
        self.assertEqual(self.note_ids(), [])  # type: ignore[attr-defined]  # deletions survive a restart

    def test_two_instances_creating_one_new_database_together_seed_it_once(self) -> None:
        opened = store_workers.open_together(self, self.open_plain)  # type: ignore[attr-defined]
        self.assertTrue(all(not isinstance(store, BaseException) for store in opened), opened)
        self.assertEqual(self.note_ids(), sorted(note.id for note in main.lesson_notes()))  # type: ignore[attr-defined]
