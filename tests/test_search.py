"""Ranked word search (notes_search and the stores' text indexes): run on SQLite, PostgreSQL and Markdown folders.

SearchContract holds the behaviours; one subclass per store says how to open it. The
folder store's own index (a file beside its ledger) has a class of its own: complete past
the old 2,000-file bound, kept current from outside edits, verified on start, each search's
reading bounded in bytes and time (its clock injected, its background work run by the test).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import unicodedata
import unittest
from collections.abc import Callable
from typing import Any
from unittest import mock

from helpers import sql_stores, store_workers
from helpers.support import FORM, KEY, PRINCIPAL, Clock, ContractCase, Log, request
from helpers.support import accept as accept_delete
from helpers.support import call as delete_call

import audit
import folder_index
import folder_paths
import frame
import main
import markdown_store
import notes_tools
import postgres_store
import sqlite_store
import text_index


def tools_call(name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return request("tools/call", {"name": name, "arguments": arguments, **extra}, capabilities=FORM)


def accept(key: str) -> dict[str, Any]:
    return {key: {"action": "accept", "content": {notes_tools.CONFIRM_FIELD: True}}}


class QueryLanguage(unittest.TestCase):
    """The query's terms and the cursor, as pure functions."""

    def test_words_are_separate_terms_and_a_quoted_phrase_is_one(self) -> None:
        self.assertEqual(
            text_index.parse('Lisbon  (invoice) "Ferry   Timetable"').terms, ("lisbon", "invoice", "ferry timetable")
        )

    def test_a_phrase_is_asked_of_the_index_by_its_words_and_tested_whole(self) -> None:
        query = text_index.parse('"w0001 w0002" quokka ox "in the park"')
        self.assertEqual(query.indexed(), ["w0001", "w0002", "quokka", "the", "park"])
        self.assertEqual(query.tested(), ["w0001 w0002", "ox", "in the park"])

    def test_a_phrase_without_a_word_of_three_characters_is_asked_of_the_index_whole(self) -> None:
        query = text_index.parse('"to be" "a b" x')
        self.assertEqual(query.indexed(), ["to be", "a b"])  # the trigrams across its spaces
        self.assertEqual(query.tested(), ["x"])

    def test_terms_are_folded_as_titles_are(self) -> None:
        self.assertEqual(text_index.parse(unicodedata.normalize("NFD", "CAFÉ")).terms, ("café",))

    def test_a_cursor_is_taken_only_for_its_own_query_and_workspace_and_within_the_row_bound(self) -> None:
        good = text_index.cursor_for("file:///a", "word", 10)
        self.assertEqual(text_index.offset_of(good, "file:///a", "word"), 10)
        self.assertIsNone(text_index.offset_of(good, "file:///a", "other"))
        self.assertIsNone(text_index.offset_of(good, "file:///b", "word"))
        self.assertIsNone(
            text_index.offset_of(
                text_index.cursor_for("file:///a", "word", text_index.MAX_RANKED_ROWS), "file:///a", "word"
            )
        )
        self.assertEqual(
            text_index.offset_of(
                text_index.cursor_for("file:///a", "word", text_index.MAX_RANKED_ROWS - 1), "file:///a", "word"
            ),
            text_index.MAX_RANKED_ROWS - 1,
        )
        for hostile in ("", "!!", "x" * (text_index.MAX_CURSOR_CHARS + 1), 12, None, "eyJvIjotMX0"):
            self.assertIsNone(text_index.offset_of(hostile, "file:///a", "word"), hostile)


class SearchContract(ContractCase):
    """Mixed into a TestCase per store: `open_store(clock)` differs."""

    def open_store(self, clock: Clock) -> Any:
        raise NotImplementedError

    notes_uri = "file:///Users/alice/Documents/Notes"
    heading_kept = True  # an SQL note's body is its text as given; a folder note's file starts with its `# title`

    @staticmethod
    def with_heading(title: str, text: str) -> str:
        return f"# {title}\n{text}"

    def setUp(self) -> None:
        self.clock = Clock()
        self.store = self.open_store(self.clock)
        self.serve()

    def serve(self) -> None:
        """A server with the note tools over self.store, the principal granted the workspace."""
        policy = main.AuthorizationPolicy({PRINCIPAL: [self.notes_uri]})
        self.server = frame.notes_server(keys=[KEY], notes=self.store, policy=policy, clock=self.clock, log=Log())
        audit.install(self.server)
        notes_tools.install(self.server)

    def call(self, name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
        response = self.server.handle(tools_call(name, arguments, **extra), PRINCIPAL)
        assert response is not None
        return response

    def result(self, name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
        response = self.call(name, arguments, **extra)
        self.assertNotIn("error", response, response)
        return response["result"]

    def create(self, title: str, body: str) -> dict[str, Any]:
        done = self.result("notes_create", {"workspaceUri": self.notes_uri, "title": title, "body": body})
        self.assertFalse(done["isError"], done)
        return done["structuredContent"]

    def search(self, query: str, **more: Any) -> dict[str, Any]:
        done = self.result("notes_search", {"workspaceUri": self.notes_uri, "query": query, **more})
        self.assertFalse(done["isError"], done)
        return done["structuredContent"]

    def titles(self, query: str, **more: Any) -> list[str]:
        return [hit["title"] for hit in self.search(query, **more)["results"]]

    def confirmed(self, name: str, args: dict[str, Any], key: str) -> dict[str, Any]:
        first = self.result(name, args)
        done = self.result(name, args, requestState=first["requestState"], inputResponses=accept(key))
        self.assertFalse(done["isError"], done)
        return done["structuredContent"]

    # ---------------------------------------------------------------- what matches

    def test_a_title_match_ranks_above_notes_that_only_link_to_it(self) -> None:
        for k in range(7):
            self.create(
                f"Trip day {k}",
                "Take the [[Zanzibar ferry timetable]] — Zanzibar ferry timetable again, zanzibar ferry timetable.",
            )
        self.create("Zanzibar ferry timetable", "Boats leave at noon.")
        self.assertEqual(self.titles("zanzibar ferry timetable")[0], "Zanzibar ferry timetable")

    def test_two_words_far_apart_in_one_note_are_found_and_each_is_required(self) -> None:
        self.create("Trip", "The invoice arrived on Monday.\n\n" + "filler words " * 40 + "\nPaid in Lisbon.")
        self.create("Lisbon only", "Lisbon is sunny.")
        self.assertEqual(self.titles("Lisbon invoice"), ["Trip"])

    def test_a_quoted_phrase_matches_only_the_words_together_in_that_order(self) -> None:
        self.create("Together", "The ferry timetable is posted.")
        self.create("Reversed", "A timetable for the ferry.")
        self.assertEqual(self.titles('"Ferry Timetable"'), ["Together"])
        self.assertEqual(sorted(self.titles("ferry timetable")), ["Reversed", "Together"])

    def test_case_and_nfd_or_nfc_spellings_find_each_other(self) -> None:
        self.create(unicodedata.normalize("NFD", "Café menu"), "crème brûlée")
        self.assertEqual(self.titles(unicodedata.normalize("NFC", "CAFÉ")), [unicodedata.normalize("NFD", "Café menu")])
        self.assertEqual(len(self.titles(unicodedata.normalize("NFD", "CRÈME Brûlée"))), 1)

    def test_japanese_is_matched_inside_a_sentence(self) -> None:
        self.create("旅行", "昨日は東京タワーに行きました。")
        self.create("Other", "大阪城")
        self.assertEqual(self.titles("東京タワー"), ["旅行"])
        self.assertEqual(self.titles("タワ"), ["旅行"])  # under three characters: tested over the rows, still found

    def test_a_snippet_leaves_out_the_notes_heading_and_shows_the_term(self) -> None:
        self.create(
            "Heading note",
            self.with_heading("Heading note", "The quokka smiled.") if self.heading_kept else "The quokka smiled.",
        )
        hit = self.search("quokka")["results"][0]
        self.assertNotIn("Heading note", hit["snippet"])
        self.assertIn("quokka", hit["snippet"])

    # ---------------------------------------------------------------- pages

    def test_a_cursor_gives_the_next_page_and_the_pages_hold_every_match_once(self) -> None:
        for k in range(5):
            self.create(f"Paged {k}", "pelican")
        seen: list[str] = []
        page = self.search("pelican", limit=2)
        while True:
            seen += [hit["noteId"] for hit in page["results"]]
            if "nextCursor" not in page:
                break
            self.assertTrue(page["more"])
            page = self.search("pelican", limit=2, cursor=page["nextCursor"])
        self.assertEqual(len(seen), 5)
        self.assertEqual(len(set(seen)), 5)

    def test_a_hostile_or_foreign_cursor_is_refused_as_invalid_params(self) -> None:
        self.create("Paged", "pelican")
        other = text_index.cursor_for(self.notes_uri, "another query", 1)
        for cursor in (
            other,
            "not-base64!",
            text_index.cursor_for(self.notes_uri, "pelican", text_index.MAX_RANKED_ROWS),
        ):
            response = self.call("notes_search", {"workspaceUri": self.notes_uri, "query": "pelican", "cursor": cursor})
            self.assertEqual(response["error"]["code"], main.INVALID_PARAMS)
            self.assertNotIn("result", response)

    # ---------------------------------------------------------------- the row bound

    def test_the_score_reads_only_the_start_of_each_note_so_a_huge_note_costs_no_more_to_rank(self) -> None:
        self.create("Early", "gannet " + "x" * 40)  # one occurrence, within the first characters
        self.create("Late", "y" * 120 + " gannet" * 30)  # thirty, every one past the first 100 characters
        self.assertEqual(self.titles("gannet"), ["Late", "Early"])  # both counted whole: Late is denser
        with mock.patch.object(text_index, "MAX_SCORED_CHARS", 100):
            # Late is still found (the match is the index's), ranked on its first 100 characters only.
            self.assertEqual(self.titles("gannet"), ["Early", "Late"])

    def bounded(self, query: str, bound: int) -> dict[str, Any]:
        """The search for `query` with MAX_RANKED_ROWS set to `bound`."""
        with mock.patch.object(text_index, "MAX_RANKED_ROWS", bound):
            return self.search(query)

    def test_the_rows_one_search_ranks_are_bounded_and_meeting_the_bound_says_stopped_early(self) -> None:
        for k in range(4):
            self.create(f"Bound {k}", "walrus")
        whole = self.bounded("walrus", 4)
        self.assertFalse(whole["stoppedEarly"])
        self.assertEqual(len(whole["results"]), 4)
        cut = self.bounded("walrus", 3)
        self.assertTrue(cut["stoppedEarly"])
        self.assertEqual(len(cut["results"]), 3)

    def test_a_phrases_bound_counts_the_notes_holding_its_words_not_only_those_holding_it(self) -> None:
        # What one search examines is the rows the index offers: for a phrase, the notes
        # holding each of its words, tested for the phrase after. Four hold both words apart.
        self.create("Together", "The ferry timetable is posted.")
        for k in range(4):
            self.create(f"Apart {k}", "A timetable for the ferry.")
        whole = self.bounded('"ferry timetable"', 5)
        self.assertFalse(whole["stoppedEarly"])
        self.assertEqual([hit["title"] for hit in whole["results"]], ["Together"])
        cut = self.bounded('"ferry timetable"', 4)
        self.assertTrue(cut["stoppedEarly"])
        self.assertIn([hit["title"] for hit in cut["results"]], ([], ["Together"]))

    def test_a_short_querys_bound_counts_the_notes_it_tests_not_only_those_holding_it(self) -> None:
        # A term under three characters is tested over the workspace's rows, within the bound.
        self.create("Short", "an ox")
        for k in range(3):
            self.create(f"Other {k}", "a cow")
        whole = self.bounded("ox", 4)
        self.assertFalse(whole["stoppedEarly"])
        self.assertEqual([hit["title"] for hit in whole["results"]], ["Short"])
        self.assertTrue(self.bounded("ox", 3)["stoppedEarly"])

    # ---------------------------------------------------------------- kept current through the tools

    def test_the_index_follows_create_append_update_move_and_delete(self) -> None:
        made = self.create("Harbour", "nothing yet")
        self.assertEqual(self.titles("gannet"), [])
        args = {"workspaceUri": self.notes_uri, "noteId": made["noteId"]}
        read = self.result("notes_read", args)["structuredContent"]
        appended = self.result("notes_append", {**args, "text": "\na gannet flew", "version": read["version"]})
        self.assertFalse(appended["isError"], appended)
        self.assertEqual(self.titles("gannet"), ["Harbour"])
        version = self.result("notes_read", args)["structuredContent"]["version"]
        self.confirmed(
            "notes_update",
            {**args, "body": self.with_heading("Harbour", "a puffin now"), "version": version},
            notes_tools.UPDATE_KEY,
        )
        self.assertEqual(self.titles("gannet"), [])
        self.assertEqual(self.titles("puffin"), ["Harbour"])
        version = self.result("notes_read", args)["structuredContent"]["version"]
        moved = self.confirmed("notes_move", {**args, "newPath": "moved-harbour.md"}, notes_tools.MOVE_KEY)
        hits = self.search("puffin")["results"]
        self.assertEqual([hit["noteId"] for hit in hits], [moved["noteId"]])
        first = self.server.handle(delete_call({"workspaceUri": self.notes_uri, "title": "Harbour"}), PRINCIPAL)
        assert first is not None
        state = first["result"]["requestState"]
        done = self.server.handle(
            delete_call(
                {"workspaceUri": self.notes_uri, "title": "Harbour"},
                requestState=state,
                inputResponses=accept_delete(moved["noteId"]),
            ),
            PRINCIPAL,
        )
        assert done is not None
        self.assertFalse(done["result"].get("isError"), done)
        self.assertEqual(self.titles("puffin"), [])


class SqliteSearch(SearchContract, unittest.TestCase):
    def open_store(self, clock: Clock) -> Any:
        folder = tempfile.mkdtemp(prefix="search-")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        store = sqlite_store.open_store(os.path.join(folder, "notes.db"), clock=clock)
        self.addCleanup(store.close)
        return store


class SqliteVersion4(unittest.TestCase):
    """A database written by the server before the search index gains it, with every body, when first opened."""

    def test_a_version_4_file_gains_the_search_index_and_loses_the_old_body_index(self) -> None:
        folder = tempfile.mkdtemp(prefix="search-v4-")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        path = os.path.join(folder, "notes.db")
        store = sqlite_store.open_store(path, clock=Clock())
        workspace = main.parse_file_uri("file:///Users/alice/Documents/Notes")
        store.create_note(PRINCIPAL, workspace, "Kept", "an albatross")
        store.close()
        raw = sqlite3.connect(path, isolation_level=None)
        for statement in (  # version 4's layout: a body-only index, no search index
            "DROP TABLE note_search",
            "DROP TRIGGER note_search_add",
            "DROP TRIGGER note_search_drop",
            "DROP TRIGGER note_search_change",
            "CREATE VIRTUAL TABLE note_body_index USING fts5(body_folded, tokenize = 'trigram')",
            "CREATE VIRTUAL TABLE note_body_grams USING fts5vocab(note_body_index, row)",
            "CREATE TRIGGER note_body_drop AFTER DELETE ON notes BEGIN DELETE FROM note_body_index WHERE rowid = "
            "old.rowid; END",
            "UPDATE meta SET value = '4' WHERE key = 'schema_version'",
        ):
            raw.execute(statement)
        raw.close()
        store = sqlite_store.open_store(path, clock=Clock())
        self.addCleanup(store.close)
        found, stopped = store.search_text(workspace, "albatross", 10)
        self.assertEqual([note.title for note, _ in found], ["Kept"])
        raw = sqlite3.connect(path)
        self.addCleanup(raw.close)
        names = {name for (name,) in raw.execute("SELECT name FROM sqlite_master")}
        self.assertIn("note_search", names)
        self.assertFalse({"note_body_index", "note_body_grams", "note_body_drop"} & names)
        self.assertEqual(
            raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone(),
            (str(sqlite_store.SCHEMA_VERSION),),
        )


class FolderSearch(SearchContract, unittest.TestCase):
    heading_kept = False  # notes_create writes the heading itself

    def open_store(self, clock: Clock) -> Any:
        self.base = os.path.realpath(tempfile.mkdtemp(prefix="search-folder-", dir=sql_stores.SCRATCH))
        self.state = tempfile.mkdtemp(prefix="search-state-", dir=sql_stores.SCRATCH)
        for folder in (self.base, self.state):
            self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        os.makedirs(os.path.join(self.base, "Notes"))
        self.notes_uri = main.format_file_uri(main.parse_file_uri("file://" + self.base + "/Notes"))
        return self.open_folder(clock)

    def open_folder(self, clock: Clock, threads: bool = False) -> markdown_store.MarkdownNotesStore:
        nonces = sqlite_store.open_ledger(os.path.join(self.state, "nonces.db"), clock=clock)
        store = markdown_store.MarkdownNotesStore(
            [self.base], nonces, clock=clock, text_index_path=os.path.join(self.state, "nonces.db-search")
        )
        self.addCleanup(store.close)
        # The index's deadline reads self.now (moved only by a test), and its background
        # work is collected here and run by background(), as its thread would, in order.
        self.now = 0.0
        store.text_index.clock = lambda: self.now
        self.jobs: list[Callable[[], None]] = []
        if not threads:
            store.text_index.spawn = self.jobs.append
        return store

    def background(self) -> None:
        """Run the background work the searches so far handed over."""
        jobs, self.jobs[:] = list(self.jobs), []
        for job in jobs:
            job()

    def write(self, name: str, text: str) -> None:
        with open(os.path.join(self.base, "Notes", name), "w", encoding="utf-8") as handle:
            handle.write(text)

    def reopen(self, threads: bool = False) -> None:
        self.store.close()
        self.store = self.open_folder(self.clock, threads)
        self.serve()

    def test_every_note_is_searched_past_the_old_bound_of_two_thousand_files(self) -> None:
        for k in range(2_100):
            self.write(f"n{k:04}.md", f"# Note {k}\nordinary words\n")
        self.write("zz-last.md", "# Last\nthe quokka hides here\n")
        found = self.search("quokka")
        self.assertEqual([hit["title"] for hit in found["results"]], ["Last"])
        self.assertFalse(found["stoppedEarly"])
        self.assertEqual(self.jobs, [])

    def test_an_outside_edit_of_a_file_is_seen_by_the_next_search(self) -> None:
        self.write("pond.md", "# Pond\na heron stood\n")
        self.assertEqual(self.titles("heron"), ["Pond"])
        self.write("pond.md", "# Pond\nan egret stood now\n")
        self.assertEqual(self.titles("heron"), [])
        self.assertEqual(self.titles("egret"), ["Pond"])
        os.unlink(os.path.join(self.base, "Notes", "pond.md"))
        self.assertEqual(self.titles("egret"), [])

    def changed_while_down(self) -> None:
        """Kept, edited and gone notes indexed; then, with the server stopped, one edited, one removed, one added."""
        self.write("kept.md", "# Kept\nan otter\n")
        self.write("edited.md", "# Edited\na badger\n")
        self.write("gone.md", "# Gone\na stoat\n")
        self.assertEqual(self.titles("otter"), ["Kept"])  # the index is built and on disk
        self.store.close()
        self.write("edited.md", "# Edited\na wolverine now, longer\n")
        os.unlink(os.path.join(self.base, "Notes", "gone.md"))
        self.write("new.md", "# New\na lynx\n")

    def test_files_changed_while_the_server_was_down_are_read_again_on_start(self) -> None:
        self.changed_while_down()
        self.reopen()
        self.search("otter")  # the first search hands the comparison with the files to the background
        self.background()
        for query, titles in (
            ("badger", []),
            ("wolverine", ["Edited"]),
            ("stoat", []),
            ("lynx", ["New"]),
            ("otter", ["Kept"]),
        ):
            found = self.search(query)
            self.assertEqual([hit["title"] for hit in found["results"]], titles, query)
            self.assertFalse(found["stoppedEarly"], query)
        self.assertEqual(self.jobs, [])

    def test_the_first_search_after_start_answers_from_the_index_saying_so_and_never_offers_a_stale_hit(self) -> None:
        self.changed_while_down()
        self.reopen()
        # Before the comparison: what the index held, each hit read again. The edited note
        # is indexed for `badger` but now says otherwise, the gone one is gone, the new one
        # not yet indexed: none is offered, and every answer says it stopped early.
        for query, titles in (("otter", ["Kept"]), ("badger", []), ("stoat", []), ("lynx", [])):
            found = self.search(query)
            self.assertEqual([hit["title"] for hit in found["results"]], titles, query)
            self.assertTrue(found["stoppedEarly"], query)
        self.assertEqual(len(self.jobs), 1)  # one background comparison, not one per search
        self.assertEqual(self.store.text_index.verified, set())
        self.background()
        self.assertEqual(self.store.text_index.verified, {self.base.strip("/")})
        self.assertEqual(self.titles("lynx"), ["New"])

    def test_after_its_background_work_the_index_is_merged_into_one_segment(self) -> None:
        for name, word in (("a.md", "otter"), ("b.md", "badger"), ("c.md", "stoat")):
            self.write(name, f"# {name}\nan {word}\n")
            self.assertEqual(len(self.search(word)["results"]), 1)  # each commit leaves a segment of its own
        self.reopen()
        self.assertTrue(self.search("otter")["stoppedEarly"])
        self.background()
        raw = sqlite3.connect(os.path.join(self.state, "nonces.db-search"), isolation_level=None)
        self.addCleanup(raw.close)
        before = raw.total_changes
        raw.execute("INSERT INTO texts (texts, rank) VALUES ('merge', -1)")
        self.assertLess(raw.total_changes - before, 2)  # FTS5 found nothing left to merge
        self.assertEqual(self.titles("badger"), ["b.md"])

    def test_the_background_comparison_runs_in_a_thread_of_its_own(self) -> None:
        self.changed_while_down()
        self.store = self.open_folder(self.clock, threads=True)
        self.serve()
        self.assertTrue(self.search("lynx")["stoppedEarly"])
        self.store.text_index.wait_idle()
        found = self.search("lynx")
        self.assertEqual([hit["title"] for hit in found["results"]], ["New"])
        self.assertFalse(found["stoppedEarly"])

    def test_a_background_comparison_that_fails_is_said_by_the_next_search_and_the_one_after_starts_again(self) -> None:
        self.changed_while_down()
        self.reopen()
        self.assertTrue(self.search("otter")["stoppedEarly"])
        index = self.store.indexes[main.parse_file_uri("file://" + self.base)]
        index.limit = 1  # more entries than the title index may hold: its walk refuses
        self.background()
        refused = self.result("notes_search", {"workspaceUri": self.notes_uri, "query": "lynx"})
        self.assertTrue(refused["isError"])
        self.assertIn("more than 1", refused["content"][0]["text"])
        self.assertEqual(self.store.text_index.verified, set())  # nothing taken for compared
        index.limit = 1_000
        self.clock.now += (
            folder_index.RESCAN_SECONDS
        )  # the title index tries a refused walk again once its interval passed
        self.assertTrue(self.search("lynx")["stoppedEarly"])
        self.background()
        self.assertEqual(self.titles("lynx"), ["New"])
        self.assertFalse(self.search("lynx")["stoppedEarly"])

    def test_an_unchanged_file_is_not_read_again_on_start(self) -> None:
        self.write("kept.md", "# Kept\nan otter\n")
        self.assertEqual(self.titles("otter"), ["Kept"])
        self.reopen()
        index = self.store.text_index
        self.store.search_text(main.parse_file_uri(self.notes_uri), "nothing", 10)
        with mock.patch.object(index, "_read", side_effect=AssertionError("read again")):
            self.background()
        self.assertEqual(self.titles("otter"), ["Kept"])

    def titles_read(self) -> list[str]:
        """Run the background work, returning the names of the files whose title the title index read."""
        read, names = folder_paths.read_title, []

        def counted(fd: int, name: str) -> Any:
            names.append(name)
            return read(fd, name)

        with mock.patch.object(folder_paths, "read_title", side_effect=counted):
            self.background()
        return sorted(names)

    def test_after_start_an_unchanged_files_title_comes_from_the_index_and_a_changed_ones_is_read(self) -> None:
        self.write("kept.md", "# Kept\nan otter\n")
        self.write("edited.md", "# Edited\na badger\n")
        self.assertEqual(self.titles("otter"), ["Kept"])
        self.store.close()
        self.write("edited.md", "# Renamed\na badger\n")
        self.reopen()
        self.search("otter")
        self.assertEqual(self.titles_read(), ["edited.md"])
        workspace = main.parse_file_uri(self.notes_uri)
        self.assertEqual([note.title for note in self.store.candidates(workspace, "Kept")], ["Kept"])
        self.assertEqual([note.title for note in self.store.candidates(workspace, "Renamed")], ["Renamed"])
        self.assertEqual(self.store.candidates(workspace, "Edited"), [])

    def test_an_index_written_without_titles_reads_its_files_again_once_and_keeps_their_titles(self) -> None:
        self.write("kept.md", "# Kept\nan otter\n")
        self.assertEqual(self.titles("otter"), ["Kept"])
        self.store.close()
        with sqlite3.connect(os.path.join(self.state, "nonces.db-search")) as older:
            older.execute("ALTER TABLE files DROP COLUMN title")
        self.reopen()
        self.assertEqual(self.search("otter")["results"][0]["title"], "Kept")
        self.assertEqual(self.titles_read(), ["kept.md"])
        self.assertEqual(self.titles("otter"), ["Kept"])
        columns = [row[1] for row in self.store.text_index.conn.execute("PRAGMA table_info(files)")]
        self.assertIn("title", columns)
        self.reopen()  # its rows were read again with their titles: the next start reads none
        self.search("otter")
        self.assertEqual(self.titles_read(), [])
        self.assertEqual(self.titles("otter"), ["Kept"])

    # ---------------------------------------------------------------- one search's reading, bounded

    NOTE_BYTES = 1_000

    def written_after_the_build(self) -> None:
        """An indexed note about gannets; then four notes of NOTE_BYTES written, one of them replacing the gannet note's
        text."""
        self.write("d-old.md", "# Old\ngannets nest here\n")
        self.assertEqual(self.titles("gannets"), ["Old"])
        for k, name in enumerate(("a-new.md", "b-new.md", "c-new.md", "d-old.md")):
            head = f"# Big {k}\nthe curlew calls\n"
            self.write(name, head + "x" * (self.NOTE_BYTES - len(head) - 1) + "\n")
            self.assertEqual(os.path.getsize(os.path.join(self.base, "Notes", name)), self.NOTE_BYTES)

    def test_a_search_reads_changed_files_up_to_its_byte_budget_and_says_complete(self) -> None:
        self.written_after_the_build()
        with mock.patch.object(text_index, "MAX_SYNC_BYTES", 4 * self.NOTE_BYTES):
            found = self.search("curlew")
        self.assertEqual(sorted(hit["title"] for hit in found["results"]), ["Big 0", "Big 1", "Big 2", "Big 3"])
        self.assertFalse(found["stoppedEarly"])
        self.assertEqual(self.jobs, [])
        self.assertEqual(self.titles("gannets"), [])

    def test_past_its_byte_budget_a_search_stops_reading_says_so_and_the_rest_is_read_after(self) -> None:
        self.written_after_the_build()
        with mock.patch.object(text_index, "MAX_SYNC_BYTES", 4 * self.NOTE_BYTES - 1):
            found = self.search("curlew")
            # Three read, in path order; the fourth (the old note's new text) is left, and
            # its old row, still indexed for gannets, is read again before it is offered.
            self.assertEqual(sorted(hit["title"] for hit in found["results"]), ["Big 0", "Big 1", "Big 2"])
            self.assertTrue(found["stoppedEarly"])
            gannets = self.search("gannets")
            self.assertEqual(gannets["results"], [])
            self.assertTrue(gannets["stoppedEarly"])
            self.assertEqual(len(self.jobs), 1)
            self.background()
            found = self.search("curlew")
        self.assertEqual(sorted(hit["title"] for hit in found["results"]), ["Big 0", "Big 1", "Big 2", "Big 3"])
        self.assertFalse(found["stoppedEarly"])
        self.assertEqual(self.jobs, [])

    def test_a_first_build_past_its_budget_answers_from_what_it_read_and_the_background_reads_the_rest(self) -> None:
        for k in range(4):
            self.write(f"n{k}.md", f"# Note {k}\nthe curlew calls\n")
        size = os.path.getsize(os.path.join(self.base, "Notes", "n0.md"))
        with mock.patch.object(text_index, "MAX_SYNC_BYTES", 2 * size):
            found = self.search("curlew")
            self.assertEqual(sorted(hit["title"] for hit in found["results"]), ["Note 0", "Note 1"])
            self.assertTrue(found["stoppedEarly"])
            self.background()
        found = self.search("curlew")
        self.assertEqual(len(found["results"]), 4)
        self.assertFalse(found["stoppedEarly"])

    def read_taking(self, seconds: float) -> None:
        """Each file the index reads moves the injected clock by `seconds`."""
        index = self.store.text_index
        read = index._read

        def slow(*args: Any) -> None:
            read(*args)
            self.now += seconds

        self.enterContext(mock.patch.object(index, "_read", side_effect=slow))

    def test_a_search_reads_changed_files_until_its_deadline_and_says_complete(self) -> None:
        self.written_after_the_build()
        self.read_taking(text_index.SYNC_SECONDS / 4)  # the fourth read starts 3/4 of the way
        found = self.search("curlew")
        self.assertEqual(len(found["results"]), 4)
        self.assertFalse(found["stoppedEarly"])
        self.assertEqual(self.jobs, [])

    def test_past_its_deadline_a_search_reads_no_further_file_says_so_and_the_rest_is_read_after(self) -> None:
        self.written_after_the_build()
        self.read_taking(text_index.SYNC_SECONDS / 2)  # the third read would start at the deadline
        found = self.search("curlew")
        self.assertEqual(sorted(hit["title"] for hit in found["results"]), ["Big 0", "Big 1"])
        self.assertTrue(found["stoppedEarly"])
        self.assertEqual(self.search("gannets")["results"], [])
        self.background()  # a step of its own: its own deadline
        found = self.search("curlew")
        self.assertEqual(len(found["results"]), 4)
        self.assertFalse(found["stoppedEarly"])

    def test_the_index_lives_beside_the_ledger_and_never_in_the_notes_folder(self) -> None:
        self.write("a.md", "# A\nword\n")
        self.titles("word")
        self.assertEqual(sorted(os.listdir(os.path.join(self.base, "Notes"))), ["a.md"])
        self.assertTrue(os.path.exists(os.path.join(self.state, "nonces.db-search")))

    def test_a_search_while_another_instance_holds_the_index_says_busy_and_loses_no_change(self) -> None:
        self.write("a.md", "# A\nword\n")
        self.assertEqual(self.titles("word"), ["A"])
        self.store.text_index.conn.execute("PRAGMA busy_timeout = 0")  # no wait: the other instance holds it now
        other = sqlite3.connect(os.path.join(self.state, "nonces.db-search"), isolation_level=None)
        self.addCleanup(other.close)
        other.execute("BEGIN EXCLUSIVE")
        self.write("b.md", "# B\nword\n")  # a change the next search must write into the index
        done = self.result("notes_search", {"workspaceUri": self.notes_uri, "query": "word"})
        self.assertTrue(done["isError"])
        self.assertNotIn(self.state, done["content"][0]["text"])
        other.execute("ROLLBACK")
        self.assertEqual(sorted(self.titles("word")), ["A", "B"])


PG = store_workers.OptionalCluster()
setUpModule, tearDownModule = PG.start, PG.stop  # only the PostgreSQL class skips


class PostgresSearch(SearchContract, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        PG.require()

    def open_store(self, clock: Clock) -> Any:
        store = postgres_store.open_store(PG.require().new_database(), clock=clock)
        self.addCleanup(store.close)
        return store

    def test_a_word_the_first_rows_hold_meets_the_bound_there_and_keeps_the_first_by_uri(self) -> None:
        for k in reversed(range(12)):  # written last to first: the table's order is the reverse of the URIs'
            self.create(f"Aa {k:02}", "plain words")
        with mock.patch.object(text_index, "MAX_RANKED_ROWS", 2):  # the first rows read: 4 x 3 = 12
            found = self.search("plain")
        self.assertTrue(found["stoppedEarly"])
        self.assertEqual(sorted(hit["title"] for hit in found["results"]), ["Aa 00", "Aa 01"])
        self.assertEqual(postgres_store.FIRST_ROWS_PER_BOUND, 4)

    def test_a_word_too_few_of_the_first_rows_hold_is_found_past_them(self) -> None:
        for k in range(12):
            self.create(f"Aa {k:02}", "plain words")
        for k in range(3):
            self.create(f"Zz {k:02}", "a narwhal here")
        with mock.patch.object(text_index, "MAX_RANKED_ROWS", 2):  # the first 12 rows by URI hold no narwhal
            cut = self.search("narwhal")
        self.assertTrue(cut["stoppedEarly"])
        self.assertEqual(len(cut["results"]), 2)
        with mock.patch.object(text_index, "MAX_RANKED_ROWS", 3):
            whole = self.search("narwhal")
        self.assertFalse(whole["stoppedEarly"])
        self.assertEqual(sorted(hit["title"] for hit in whole["results"]), ["Zz 00", "Zz 01", "Zz 02"])


if __name__ == "__main__":
    unittest.main()
