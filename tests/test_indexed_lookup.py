"""Indexed lookups in the SQL stores: the same candidates as a plain scan, read through indexes, from migrated files
too."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import tempfile
import unicodedata
import unittest
from typing import Any
from unittest import mock

from helpers import old_schemas
from helpers.sql_stores import SCRATCH
from helpers.support import PRINCIPAL, WORKSPACE, Clock, ContractCase

import main
import postgres_store
import sqlite_store
import stores
import test_store_contract
import title_index
from test_store_contract import contract_notes

ALWAYS = lambda note: True  # noqa: E731 - a recheck that accepts every live note
PROPERTY_SEED = 20261201  # seeded: every run checks the same random cases
PROPERTY_NOTES = 80  # notes per random store
PROPERTY_QUERIES = 150  # lookups compared per store
PROPERTY_EDITS = 40  # puts and removals between two rounds of lookups
ROOT = "file:///Users/alice"
FOLDERS = ("Notes", "Notes-evil", "Notes/sub", "Notes/sub/deeper", "Notesx", "Other", "Notes/Notes")
WORKSPACES = ("Notes", "Notes-evil", "Notes/sub", "Notes/sub/deeper", "Other", "Notes/Notes")
# Pieces of titles: cased, composed and decomposed accents, ß (folds to "ss"), the final
# sigma, LIKE and FTS5 syntax characters, spaces.
PIECES = ("a", "B", "c", "é", "e\u0301", "ß", "SS", "Σ", "ς", "%", "_", "\\", '"', " ", "x", "7", "Ω", "ǅ")


def setUpModule() -> None:
    test_store_contract.setUpModule()  # the throwaway cluster, or the reason the PostgreSQL classes skip


def tearDownModule() -> None:
    test_store_contract.tearDownModule()
    test_store_contract.PG.cluster = None  # this module started it; the contract module starts its own


def plain_scan(notes: list[main.Note], workspace: main.Path, title: str) -> list[main.Note]:
    """What a lookup must answer: every note whose folded title holds the folded query, strictly inside, in form
    order."""
    needle = stores.fold_title(title)
    return stores.form_order(
        note for note in notes if needle in stores.fold_title(note.title) and main.inside_workspace(note, workspace)
    )


def random_title(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8))).strip() or "t"


def random_query(rng: random.Random, titles: list[str]) -> str:
    """A piece of a title (any spelling of it) half the time, else random characters; 1 to 5 long."""
    if rng.random() < 0.5:
        title = rng.choice(titles)
        start = rng.randrange(len(title))
        query = title[start : start + rng.randint(1, 5)]
        return rng.choice((query, query.upper(), query.lower(), unicodedata.normalize("NFD", query)))
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 3)))


class SqliteCase(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="indexed-", dir=SCRATCH)
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.path = os.path.join(self.dir, "notes.db")
        self.clock = Clock()

    def open(self, seed: list[main.Note] | None = None) -> sqlite_store.SqliteNotesStore:
        store = sqlite_store.open_store(self.path, clock=self.clock, seed_notes=seed)
        self.addCleanup(store.close)
        return store

    def raw(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(conn.close)
        return conn

    def file_bytes(self) -> bytes:
        with open(self.path, "rb") as handle:
            return handle.read()


# ---------------------------------------------------------------- the contract, both sides of the short-query limit


def every_query_is_short(case: unittest.TestCase) -> None:
    """Raise the trigram limit past every contract query: each one takes the workspace-range path."""
    patcher = mock.patch.object(title_index, "MIN_INDEXED_QUERY", 100)
    patcher.start()
    case.addCleanup(patcher.stop)


class SqliteContractShortQueries(test_store_contract.SqliteContract):
    def setUp(self) -> None:
        every_query_is_short(self)
        super().setUp()


class SqliteContractWithoutTrigramTokenizer(test_store_contract.SqliteContract):
    def setUp(self) -> None:
        patcher = mock.patch.object(sqlite_store, "trigram_support", lambda: "no FTS5 here")
        patcher.start()
        self.addCleanup(patcher.stop)
        super().setUp()

    def test_the_start_up_line_says_lookups_read_the_workspaces_rows_and_why(self) -> None:
        line = self.store.describe()
        self.assertIn("no title index (no FTS5 here)", line)
        self.assertNotIn("\n", line)


class PostgresContractShortQueries(test_store_contract.PostgresContract):
    def setUp(self) -> None:
        every_query_is_short(self)
        super().setUp()


class ShortQueries(SqliteCase):
    def test_one_and_two_character_queries_find_what_a_scan_finds(self) -> None:
        notes = contract_notes()
        store = self.open(notes)
        workspace = main.parse_file_uri(WORKSPACE)
        for query in ("a", "AL", "é", "e\u0301", "t", "zz", "ß"):
            with self.subTest(query=query):
                self.assertEqual(store.candidates(workspace, query), plain_scan(notes, workspace, query))
        self.assertEqual([n.id for n in store.candidates(workspace, "A")], ["n-a1", "n-a2", "n-b"])

    def test_the_limit_is_three_folded_characters(self) -> None:
        self.assertEqual(title_index.MIN_INDEXED_QUERY, 3)
        self.assertFalse(title_index.uses_title_index("ab"))
        self.assertTrue(title_index.uses_title_index("abc"))
        self.assertTrue(title_index.uses_title_index(stores.fold_title("aß")))  # "ass": folding can lengthen a query


# ---------------------------------------------------------------- the workspace key


class WorkspaceKey(unittest.TestCase):
    def test_the_range_holds_the_workspaces_notes_and_never_the_look_alike_folder(self) -> None:
        low, high = title_index.uri_range(main.parse_file_uri("file:///A/Notes"))
        self.assertEqual((low, high), ("file:///A/Notes/", "file:///A/Notes0"))
        inside = ("file:///A/Notes/x.md", "file:///A/Notes/sub/y.md", "file:///A/Notes/%C3%A9.md")
        outside = (
            "file:///A/Notes-evil/x.md",
            "file:///A/Notes",
            "file:///A/Notesx/y.md",
            "file:///A/Notes0/y.md",
            "file:///A/N/x.md",
        )
        self.assertTrue(all(low <= uri < high for uri in inside))
        self.assertFalse(any(low <= uri < high for uri in outside))

    def test_the_root_workspace_takes_every_canonical_uri(self) -> None:
        self.assertEqual(title_index.uri_range(()), ("file:///", "file://0"))

    def test_a_row_with_a_uri_spelled_otherwise_gets_no_index_key_and_is_scanned(self) -> None:
        self.assertEqual(title_index.index_key(main.Note("a", "ÉTÉ", "file:///A/x.md")), "été")
        self.assertIsNone(title_index.index_key(main.Note("a", "T", "file://localhost/A/x.md")))
        self.assertIsNone(title_index.index_key(main.Note("a", "T", "http://example.com/x")))


class TrigramRanking(unittest.TestCase):
    def test_the_rarest_trigrams_come_first_and_unknown_ones_before_every_counted_one(self) -> None:
        counts = {"abc": 2, "bcd": 2, "bce": 1, "xbc": 1}  # of "abcd", "abce", "xbcd"
        self.assertEqual(title_index.rarest("abce", counts, 1), ["bce"])
        self.assertEqual(title_index.rarest("abcq", counts, 2), ["bcq", "abc"])
        self.assertEqual(title_index.rarest("ab", counts, 2), [])


class StaleCountsLoseNoMatch(SqliteCase):
    def test_whatever_the_counts_say_every_match_is_found(self) -> None:
        notes = contract_notes()
        store = self.open(notes)
        workspace = main.parse_file_uri(WORKSPACE)
        rng = random.Random(PROPERTY_SEED)
        for _ in range(20):
            counts = {
                gram: rng.randrange(5) for note in notes for gram in title_index.trigrams(stores.fold_title(note.title))
            }
            with mock.patch.object(store, "_counts_of", lambda grams, counts=counts: counts):
                for query in ("alpha", "report", "BÉTA rep", "ha r"):
                    self.assertEqual(store.candidates(workspace, query), plain_scan(notes, workspace, query))


# ---------------------------------------------------------------- property: indexed lookups equal a plain scan


class PropertyCheck:
    """Mixed in: random notes in look-alike folders, random queries; the store must answer as the scan does."""

    def open_with(self, notes: list[main.Note]) -> Any:
        raise NotImplementedError

    def test_indexed_lookups_equal_a_plain_scan_on_random_titles_and_workspaces(self) -> None:
        rng = random.Random(PROPERTY_SEED)
        notes = [
            main.Note(f"p{i}", random_title(rng), f"{ROOT}/{rng.choice(FOLDERS)}/f{i}.md", rng.randint(0, 3))
            for i in range(PROPERTY_NOTES)
        ]
        store = self.open_with(notes)
        live = {note.id: note for note in stores.checked_notes(notes)}
        for round_ in range(2):
            titles = [note.title for note in live.values()]
            for _ in range(PROPERTY_QUERIES):
                workspace = main.parse_file_uri(f"{ROOT}/{rng.choice(WORKSPACES)}") if rng.random() < 0.9 else ()
                query = random_query(rng, titles)
                with self.subTest(round=round_, workspace=workspace, query=query):  # type: ignore[attr-defined]
                    expected = plain_scan(list(live.values()), workspace, query)
                    self.assertEqual(store.candidates(workspace, query), expected)  # type: ignore[attr-defined]
            for _ in range(PROPERTY_EDITS):  # edits through the store: the index follows them
                note_id = f"p{rng.randrange(PROPERTY_NOTES)}"
                if rng.random() < 0.3:
                    store.remove(note_id)
                    live.pop(note_id, None)
                else:
                    edited = main.Note(
                        note_id, random_title(rng), f"{ROOT}/{rng.choice(FOLDERS)}/f{note_id}.md", rng.randint(0, 3)
                    )
                    store.put(edited)
                    live[note_id] = edited


class SqliteProperty(PropertyCheck, SqliteCase):
    def open_with(self, notes: list[main.Note]) -> Any:
        return self.open(notes)


class SqliteShortProperty(PropertyCheck, SqliteCase):
    def open_with(self, notes: list[main.Note]) -> Any:
        every_query_is_short(self)
        return self.open(notes)


# ---------------------------------------------------------------- the indexes are used


class SqliteQueryPlans(SqliteCase):
    def plan(self, sql: str, params: tuple[Any, ...]) -> str:
        return " | ".join(row[-1] for row in self.raw().execute("EXPLAIN QUERY PLAN " + sql, params))

    def assertNoTableScan(self, plan: str) -> None:
        # The partial index holds only the rows another program wrote: reading it whole is the point.
        whole = [
            step
            for step in plan.split(" | ")
            if step.startswith("SCAN notes") and step != "SCAN notes USING INDEX notes_unindexed"
        ]
        self.assertEqual(whole, [])

    def test_a_long_query_reads_the_title_index_and_the_uri_range_never_the_whole_table(self) -> None:
        self.open(contract_notes())
        plan = self.plan(sqlite_store._BY_TITLE, ('"alp"', "file:///a/", "file:///a0"))
        self.assertIn("note_titles VIRTUAL TABLE", plan)
        self.assertIn("SEARCH notes USING INTEGER PRIMARY KEY (rowid=?)", plan)
        self.assertIn("USING INDEX notes_unindexed", plan)
        self.assertNoTableScan(plan)

    def test_a_short_query_reads_the_workspaces_uri_range(self) -> None:
        self.open(contract_notes())
        plan = self.plan(sqlite_store._BY_FOLDER, ("file:///a/", "file:///a0", "al"))
        self.assertIn("USING INDEX notes_by_uri (uri>? AND uri<?)", plan)
        self.assertNoTableScan(plan)

    def test_the_start_up_line_names_the_title_index(self) -> None:
        line = self.open(contract_notes()).describe()
        self.assertIn("FTS5 trigram", line)
        self.assertIn(sqlite3.sqlite_version, line)


# ---------------------------------------------------------------- rows another program writes


class RowsWrittenElsewhere(SqliteCase):
    def test_a_row_inserted_by_another_program_without_a_folded_title_is_still_found(self) -> None:
        store = self.open(contract_notes())
        self.raw().execute(
            "INSERT INTO notes (id, title, uri, revision) VALUES ('hand', 'Gamma plan', ?, 0)", (f"{WORKSPACE}/g.md",)
        )
        workspace = main.parse_file_uri(WORKSPACE)
        self.assertEqual([n.id for n in store.candidates(workspace, "gamma")], ["hand"])
        self.assertEqual([n.id for n in store.candidates(workspace, "ga")], ["hand"])
        self.assertEqual(store.candidates(main.parse_file_uri(f"{WORKSPACE}-evil"), "gamma"), [])

    def test_a_title_changed_by_another_program_is_found_by_its_new_title_only(self) -> None:
        store = self.open(contract_notes())
        raw = self.raw()
        raw.execute("UPDATE notes SET title = 'Delta memo' WHERE id = 'n-a1'")
        self.assertEqual(raw.execute("SELECT folded FROM notes WHERE id = 'n-a1'").fetchone(), (None,))
        workspace = main.parse_file_uri(WORKSPACE)
        self.assertEqual([n.id for n in store.candidates(workspace, "delta")], ["n-a1"])
        self.assertEqual([n.id for n in store.candidates(workspace, "alpha")], ["n-a2"])
        self.assertEqual(raw.execute("SELECT folded FROM notes WHERE id = 'n-a2'").fetchone(), ("alpha report",))

    def test_a_deletion_inside_consume_drops_the_title_from_the_index_in_the_same_commit(self) -> None:
        store = self.open(contract_notes())
        target = ("n-b", {n.id: n for n in store.all()}["n-b"].version)
        self.assertIs(store.consume(PRINCIPAL, "n1", self.clock.now + 60, target, ALWAYS), main.Settlement.DELETED)
        raw = self.raw()
        self.assertEqual(
            raw.execute("SELECT count(*) FROM note_titles").fetchone(),
            raw.execute("SELECT count(*) FROM notes").fetchone(),
        )
        self.assertEqual(raw.execute("SELECT rowid FROM note_titles WHERE note_titles MATCH '\"béta\"'").fetchall(), [])


# ---------------------------------------------------------------- what one title may cost the index


def bounded_titles() -> tuple[str, str]:
    """Two titles of 200 characters folding to MAX_INDEXED_TITLE_CHARS and one more ("ß" folds to "ss"), every trigram
    new."""
    bound = title_index.MAX_INDEXED_TITLE_CHARS
    rng = random.Random(PROPERTY_SEED)
    titles = []
    for folded in (bound, bound + 1):
        doubled = folded - main.MAX_TITLE_LENGTH
        cjk = "".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(main.MAX_TITLE_LENGTH - doubled))
        titles.append(cjk[:50] + "ß" * doubled + cjk[50:])
    at, past = titles
    assert (len(stores.fold_title(at)), len(stores.fold_title(past))) == (bound, bound + 1)
    return at, past


def parts(title: str) -> list[str]:
    """Queries of every kind of part of `title`: its start, middle, end, the whole, short pieces, across the ß run."""
    return [title[:5], title[95:110], title[-7:], title, title[48:53], title[-2:], title[:2], title[100:115].upper()]


class TitleLengthBound(ContractCase):
    """Mixed in: a title at MAX_INDEXED_TITLE_CHARS (folded) is indexed, one past it is not, and both are found by any
    part."""

    def open_with(self, notes: list[main.Note]) -> Any:
        raise NotImplementedError

    def folded_column(self, note_id: str) -> Any:
        raise NotImplementedError

    def test_titles_at_and_past_the_indexed_length_are_found_by_any_part_and_only_the_first_is_indexed(self) -> None:
        at, past = bounded_titles()
        notes = [
            *contract_notes(),
            main.Note("at", at, f"{WORKSPACE}/at.md"),
            main.Note("past", past, f"{WORKSPACE}/past.md"),
        ]
        store = self.open_with(notes)
        workspace = main.parse_file_uri(WORKSPACE)
        for title in (at, past):
            for query in parts(title):
                self.assertEqual(store.candidates(workspace, query), plain_scan(notes, workspace, query))
                self.assertIn(title, [n.title for n in store.candidates(workspace, query)])
        self.assertEqual(self.folded_column("at"), stores.fold_title(at))  # held by the trigram index
        self.assertIsNone(self.folded_column("past"))  # kept off it: read and tested by every lookup
        self.assertEqual(store.candidates(main.parse_file_uri(f"{WORKSPACE}-evil"), past[:5]), [])
        self.assertEqual(title_index.MAX_INDEXED_TITLE_CHARS, 256)

    def test_a_title_of_any_length_is_still_found_by_a_query_of_its_last_characters(self) -> None:
        long = "Quarterly " * 500 + "closing memo"
        notes = [*contract_notes(), main.Note("long", long, f"{WORKSPACE}/long.md")]
        store = self.open_with(notes)
        workspace = main.parse_file_uri(WORKSPACE)
        self.assertEqual([n.id for n in store.candidates(workspace, "closing memo")], ["long"])
        self.assertIsNone(self.folded_column("long"))


class SqliteTitleLengthBound(TitleLengthBound, SqliteCase):
    def open_with(self, notes: list[main.Note]) -> Any:
        return self.open(notes)

    def folded_column(self, note_id: str) -> Any:
        return self.raw().execute("SELECT folded FROM notes WHERE id = ?", (note_id,)).fetchone()[0]

    def test_the_index_holds_at_most_the_bound_less_two_trigrams_per_title(self) -> None:
        at, past = bounded_titles()
        self.open([main.Note("at", at, f"{WORKSPACE}/at.md"), main.Note("past", past, f"{WORKSPACE}/past.md")])
        raw = self.raw()
        raw.execute("CREATE VIRTUAL TABLE temp.held USING fts5vocab(main, note_titles, instance)")
        per_note = dict(
            raw.execute(
                "SELECT notes.id, count(DISTINCT term) FROM temp.held JOIN notes ON notes.rowid = held.doc GROUP BY "
                "notes.id"
            )
        )
        self.assertEqual(per_note, {"at": len(title_index.trigrams(stores.fold_title(at)))})
        self.assertLessEqual(per_note["at"], title_index.MAX_INDEXED_TITLE_CHARS - 2)

    def test_a_lookup_reads_the_counts_of_its_own_trigrams_only(self) -> None:
        rng = random.Random(PROPERTY_SEED)
        titles = ["".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(190)) for _ in range(50)]
        store = self.open([main.Note(f"c{i}", title, f"{WORKSPACE}/c{i}.md") for i, title in enumerate(titles)])
        real, read = store._read, []

        def counted(sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
            rows = real(sql, params)
            read.append((sql, len(rows)))
            return rows

        query = titles[7][20:30]
        with mock.patch.object(store, "_read", counted):
            self.assertEqual([n.id for n in store.candidates(main.parse_file_uri(WORKSPACE), query)], ["c7"])
        vocabulary = [rows for sql, rows in read if "note_title_grams" in sql]
        self.assertEqual(vocabulary, [len(title_index.trigrams(query))])  # 8 of the store's 9,400 trigrams


# ---------------------------------------------------------------- migration


class SqliteMigration(SqliteCase):
    def test_a_version_2_database_is_migrated_in_place_once_and_answers_as_before(self) -> None:
        notes = contract_notes()
        old_schemas.old_sqlite(self.path, notes)
        self.raw().execute("INSERT INTO consumed_nonces VALUES ('kept', 'alice', ?)", (self.clock.now + 60,))
        store = self.open(seed=[main.Note("seed", "Seed", f"{WORKSPACE}/s.md")])  # an existing file is never seeded
        raw = self.raw()
        self.assertEqual(
            raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone(),
            (str(sqlite_store.SCHEMA_VERSION),),
        )
        self.assertEqual(store.all(), sorted(notes, key=lambda n: n.id))  # same rows, same versions
        self.assertTrue(store.is_consumed("kept"))
        self.assertEqual(raw.execute("SELECT count(*) FROM note_titles").fetchone(), (len(notes),))
        for query in ("alpha", "REPORT", "B\u00c9TA", "al", "t"):
            workspace = main.parse_file_uri(WORKSPACE)
            self.assertEqual(store.candidates(workspace, query), plain_scan(notes, workspace, query))
        store.close()
        again = self.open()  # once: the second opening finds the current version and changes nothing
        self.assertEqual(again.all(), sorted(notes, key=lambda n: n.id))

    def test_a_database_that_cannot_be_migrated_is_refused_in_one_line_and_left_untouched(self) -> None:
        old_schemas.old_sqlite(self.path, contract_notes())
        self.raw().execute("ALTER TABLE notes ADD COLUMN folded BLOB")  # an operator's own column, in our way
        before = self.file_bytes()
        with self.assertRaises(stores.StoreError) as caught:
            sqlite_store.open_store(self.path, clock=self.clock)
        message = str(caught.exception)
        self.assertIn(f"(schema version 2) cannot be migrated to version {sqlite_store.SCHEMA_VERSION}", message)
        self.assertIn("left unchanged", message)
        self.assertNotIn("\n", message)
        self.assertEqual(self.file_bytes(), before)
        self.assertEqual(self.raw().execute("SELECT value FROM meta").fetchall(), [("2",)])
        self.assertIsNone(self.raw().execute("SELECT 1 FROM sqlite_master WHERE name = 'notes_by_uri'").fetchone())

    def test_a_row_whose_title_is_not_text_migrates_unindexed_and_is_never_offered(self) -> None:
        # A notes table made by hand without the CHECKs: a BLOB title, an integer id.
        conn = sqlite3.connect(self.path, isolation_level=None)
        for statement in old_schemas.SQLITE_V2[:1] + old_schemas.SQLITE_V2[2:] + old_schemas.SQLITE_HIGH_WATER:
            conn.execute(statement)
        conn.execute("CREATE TABLE notes (id, title, uri, revision)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        conn.execute("INSERT INTO notes VALUES ('blob', x'414c504841', ?, 0)", (f"{WORKSPACE}/b.md",))
        conn.execute("INSERT INTO notes VALUES (7, 'alpha seven', ?, 0)", (f"{WORKSPACE}/s.md",))
        conn.execute("INSERT INTO notes VALUES ('ok', 'alpha ok', ?, 0)", (f"{WORKSPACE}/o.md",))
        conn.close()
        store = self.open()
        self.assertEqual(
            self.raw().execute("SELECT id, folded FROM notes ORDER BY rowid").fetchall(),
            [("blob", None), (7, "alpha seven"), ("ok", "alpha ok")],
        )
        workspace = main.parse_file_uri(WORKSPACE)
        for query in ("alpha", "al", "x"):
            self.assertEqual([n.id for n in store.candidates(workspace, query)], ["ok"] if query != "x" else [])

    def test_a_file_with_a_title_index_this_sqlite_cannot_keep_is_refused_untouched(self) -> None:
        self.open(contract_notes()).close()
        before = self.file_bytes()
        with mock.patch.object(sqlite_store, "trigram_support", lambda: "SQLite 3.31 has no FTS5 trigram tokenizer"):
            with self.assertRaises(stores.StoreError) as caught:
                sqlite_store.open_store(self.path, clock=self.clock)
        self.assertIn("has an FTS5 trigram title index, but SQLite 3.31", str(caught.exception))
        self.assertEqual(self.file_bytes(), before)

    def test_an_sqlite_without_the_trigram_tokenizer_reopens_a_file_made_without_the_index(self) -> None:
        with mock.patch.object(sqlite_store, "trigram_support", lambda: "none"):
            self.open(contract_notes()).close()
            store = self.open()  # not refused: there is no index it cannot keep
            self.assertEqual(
                [n.id for n in store.candidates(main.parse_file_uri(WORKSPACE), "alpha")], ["n-a1", "n-a2"]
            )
        self.assertIsNone(self.raw().execute("SELECT 1 FROM sqlite_master WHERE name = 'note_titles'").fetchone())

    def test_a_file_made_without_the_title_index_gains_it_when_this_sqlite_has_it(self) -> None:
        with mock.patch.object(sqlite_store, "trigram_support", lambda: "none"):
            self.open(contract_notes()).close()
        self.assertIsNone(self.raw().execute("SELECT 1 FROM sqlite_master WHERE name = 'note_titles'").fetchone())
        store = self.open()
        self.assertEqual(self.raw().execute("SELECT count(*) FROM note_titles").fetchone(), (len(contract_notes()),))
        self.assertEqual([n.id for n in store.candidates(main.parse_file_uri(WORKSPACE), "alpha")], ["n-a1", "n-a2"])


# ---------------------------------------------------------------- PostgreSQL


class PostgresCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        test_store_contract.PostgresContract.setUpClass()

    def setUp(self) -> None:
        self.url = test_store_contract.PG.require().new_database()
        self.clock = Clock()

    def open(self, seed: list[main.Note] | None = None) -> postgres_store.PostgresNotesStore:
        store = postgres_store.open_store(self.url, clock=self.clock, seed_notes=seed or ())
        self.addCleanup(store.close)
        return store

    def raw(self) -> Any:
        conn = postgres_store.psycopg.connect(self.url, autocommit=True)
        self.addCleanup(conn.close)
        return conn


class PostgresProperty(PropertyCheck, PostgresCase):
    def open_with(self, notes: list[main.Note]) -> Any:
        return self.open(notes)


class PostgresTitleLengthBound(TitleLengthBound, PostgresCase):
    def open_with(self, notes: list[main.Note]) -> Any:
        return self.open(notes)

    def folded_column(self, note_id: str) -> Any:
        return self.raw().execute("SELECT folded FROM notes WHERE id = %s", (note_id,)).fetchone()[0]

    def test_the_ranking_counts_keep_only_the_most_common_trigrams_and_lose_no_match(self) -> None:
        rng = random.Random(PROPERTY_SEED)
        notes = [
            main.Note(f"c{i}", "".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(190)), f"{WORKSPACE}/c{i}.md")
            for i in range(40)
        ]
        notes.append(main.Note("twin", notes[3].title[10:40], f"{WORKSPACE}/twin.md"))
        store = self.open(notes)
        workspace = main.parse_file_uri(WORKSPACE)
        with mock.patch.object(postgres_store, "TRIGRAM_COUNTS_KEPT", 5):
            counts = store._trigram_counts()
            self.assertEqual(len(counts), 5)  # of 7,500 trigrams in the sample
            self.assertEqual(max(counts.values()), 2)  # the twin's, held by two titles
            for query in (notes[3].title[15:25], notes[9].title[100:120], notes[3].title[5:15]):
                self.assertEqual(store.candidates(workspace, query), plain_scan(notes, workspace, query))

    def test_rows_added_past_the_planners_count_are_analyzed_before_the_sample(self) -> None:
        store = self.open([main.Note("s", "Seed", f"{WORKSPACE}/s.md")])
        raw = self.raw()
        raw.execute("ALTER TABLE notes SET (autovacuum_enabled = false)")  # only the store may analyze
        raw.execute(
            "INSERT INTO notes (id, title, uri, revision, folded) SELECT 'h' || k, 'Hand ' || k, %s || k || "
            "'.md', 0, 'hand ' || k"
            " FROM generate_series(1, 3000) AS k",
            (f"{WORKSPACE}/h",),
        )
        raw.execute("SELECT pg_stat_force_next_flush()")
        planned = lambda: raw.execute("SELECT reltuples FROM pg_class WHERE oid = 'notes'::regclass").fetchone()[0]  # noqa: E731
        self.assertLess(planned(), 10)
        self.assertEqual([n.id for n in store.candidates(main.parse_file_uri(WORKSPACE), "hand 2999")], ["h2999"])
        self.assertEqual(planned(), 3001)
        self.assertEqual(postgres_store.STALE_STATISTICS_FACTOR, 2)


class PostgresIndexes(PostgresCase):
    def plan(self, workspace: str, query: str) -> str:
        conn = self.raw()
        conn.execute("SET enable_seqscan = off")  # a table this small would be read whole otherwise
        low, high = title_index.uri_range(main.parse_file_uri(workspace))
        rows = conn.execute("EXPLAIN " + postgres_store._LOOKUP_QUERY, (low, high, f"%{query}%")).fetchall()
        return " | ".join(row[0] for row in rows)

    def test_lookups_read_the_uri_and_title_indexes_and_the_line_names_pg_trgm(self) -> None:
        store = self.open(contract_notes())
        plan = self.plan(WORKSPACE, "alpha")
        self.assertTrue("notes_by_uri" in plan or "notes_by_title" in plan, plan)
        self.assertIn("notes_unindexed", plan)
        self.assertIn("pg_trgm", store.describe())
        index = self.raw().execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'notes_by_title'").fetchone()
        self.assertIn("gin_trgm_ops", index[0])

    def test_without_pg_trgm_the_store_serves_and_says_why_in_its_start_up_line(self) -> None:
        real = postgres_store._TITLES
        self.addCleanup(setattr, postgres_store, "_TITLES", real)
        postgres_store._TITLES = "CREATE INDEX notes_by_title ON notes USING gin (folded no_such_ops)"
        store = self.open(contract_notes())
        self.assertIn("no title index (pg_trgm unavailable:", store.describe())
        self.assertEqual([n.id for n in store.candidates(main.parse_file_uri(WORKSPACE), "alpha")], ["n-a1", "n-a2"])

    def test_a_row_inserted_or_retitled_by_another_program_is_still_found(self) -> None:
        store = self.open(contract_notes())
        raw = self.raw()
        raw.execute(
            "INSERT INTO notes (id, title, uri, revision) VALUES ('hand', 'Gamma plan', %s, 0)", (f"{WORKSPACE}/g.md",)
        )
        raw.execute("UPDATE notes SET title = 'Delta memo' WHERE id = 'n-a1'")
        workspace = main.parse_file_uri(WORKSPACE)
        self.assertEqual([n.id for n in store.candidates(workspace, "gamma")], ["hand"])
        self.assertEqual([n.id for n in store.candidates(workspace, "delta")], ["n-a1"])
        self.assertEqual([n.id for n in store.candidates(workspace, "alpha")], ["n-a2"])

    def test_a_version_1_schema_is_migrated_in_place_once_and_answers_as_before(self) -> None:
        notes = contract_notes()
        old_schemas.old_postgres(self.raw(), notes)
        store = self.open(seed=[main.Note("seed", "Seed", f"{WORKSPACE}/s.md")])
        raw = self.raw()
        self.assertEqual(raw.execute("SELECT value FROM meta").fetchall(), [(str(postgres_store.SCHEMA_VERSION),)])
        self.assertEqual(store.all(), sorted(notes, key=lambda n: n.id))
        workspace = main.parse_file_uri(WORKSPACE)
        for query in ("alpha", "REPORT", "B\u00c9TA", "al"):
            self.assertEqual(store.candidates(workspace, query), plain_scan(notes, workspace, query))
        store.close()
        self.assertEqual(self.open().all(), sorted(notes, key=lambda n: n.id))

    def test_a_schema_that_cannot_be_migrated_is_refused_in_one_line_and_left_untouched(self) -> None:
        old_schemas.old_postgres(self.raw(), contract_notes())
        self.raw().execute("ALTER TABLE notes ADD COLUMN folded bytea")
        with self.assertRaises(stores.StoreError) as caught:
            postgres_store.open_store(self.url, clock=self.clock)
        message = str(caught.exception)
        self.assertIn(f"(schema version 1) cannot be migrated to version {postgres_store.SCHEMA_VERSION}", message)
        self.assertNotIn("\n", message)
        raw = self.raw()
        self.assertEqual(raw.execute("SELECT value FROM meta").fetchall(), [("1",)])
        self.assertIsNone(raw.execute("SELECT to_regclass('notes_by_uri')").fetchone()[0])
        self.assertEqual(raw.execute("SELECT count(*) FROM notes").fetchone(), (len(contract_notes()),))


if __name__ == "__main__":
    unittest.main()
