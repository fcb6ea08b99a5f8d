"""The Markdown folder store's title index: read once per file version, kept current, never trusted for a deletion."""

from __future__ import annotations

import gc
import os
import random
import shutil
import tempfile
import threading
import unittest
from typing import Any
from unittest import mock

from helpers.sql_stores import SCRATCH, new_database
from helpers.support import accept

import change_watch
import folder_index
import folder_paths
import frame
import main
import sqlite_store
import stores
import title_index
from benchmarks.index_rebuild import overflow_queue
from markdown_store import MarkdownNotesStore
from test_indexed_lookup import bounded_titles, parts
from test_markdown_store import FolderCase

TOO_LARGE = "more than [0-9,]+ entries"  # folder_paths.TOO_LARGE, the refusal of a folder past the entry limit


def _link(fd: str) -> str:
    """What /proc/self/fd/`fd` points at, or "" when it closed meanwhile."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


CHANGED_TEXT = "changed, moved or was deleted since the form was shown"


class IndexCase(FolderCase):
    """A folder store with the index's clock in the test's hands."""

    watch = True

    def setUp(self) -> None:
        super().setUp()
        self.ticks = [0.0]

    def indexed(self, **options: Any) -> MarkdownNotesStore:
        nonces = sqlite_store.open_ledger(new_database(os.path.join(self.base, "nonces.db")), clock=self.clock)
        options.setdefault("watch", self.watch)
        store = MarkdownNotesStore([self.ws], nonces, clock=lambda: self.ticks[0], **options)
        self.addCleanup(store.close)
        return store

    def index(self, store: MarkdownNotesStore) -> folder_index.FolderIndex:
        (index,) = store.indexes.values()
        return index

    def server(self, store: MarkdownNotesStore | None = None) -> frame.Server:
        return super().server(store or self.indexed())

    def refused_as_changed(self, done: dict[str, Any]) -> None:
        self.assertTrue(done["result"]["isError"])
        self.assertIn(CHANGED_TEXT, done["result"]["content"][0]["text"])

    def indexed_facts(self, store: MarkdownNotesStore, *rel: str) -> tuple[int, ...] | None:
        held = self.index(store).files.get(rel)
        return held[0] if held is not None else None


class ChangeNotification(IndexCase):
    def test_the_start_up_line_says_changes_come_from_inotify(self) -> None:
        line = self.indexed().describe()[0]
        self.assertIn("changes learnt from Linux inotify", line)
        self.assertNotIn("\n", line)

    def test_a_note_added_edited_or_removed_is_seen_at_the_next_lookup_and_only_it_is_read(self) -> None:
        self.write("a.md", "# TPS a\n")
        self.write("sub/b.md", "# TPS b\n")
        store = self.indexed()
        self.assertEqual(self.listed(store, "TPS"), {"a.md": "TPS a", "sub/b.md": "TPS b"})
        real = folder_paths.read_title
        read: list[str] = []

        def counting(fd: int, name: str, *args: Any) -> Any:
            read.append(name)
            return real(fd, name, *args)

        self.write("sub/c.md", "# TPS c\n")
        self.write("a.md", "# Budget\n")
        os.unlink(os.path.join(self.ws, "sub", "b.md"))
        with mock.patch.object(folder_paths, "read_title", counting):
            self.assertEqual(self.listed(store, "zzz"), {})  # no candidate: only the index is consulted
        self.assertEqual(sorted(read), ["a.md", "c.md"])
        self.assertEqual(self.listed(store, "TPS"), {"sub/c.md": "TPS c"})
        self.assertEqual(self.listed(store, "budget"), {"a.md": "Budget"})

    def test_the_changed_entries_of_one_folder_are_looked_at_through_one_open_of_it(self) -> None:
        self.write("sub/a.md", "# TPS a\n")
        store = self.indexed()
        self.listed(store, "TPS")
        for name in ("a", "b", "c", "d"):
            self.write(f"sub/{name}.md", f"# Budget {name}\n")
        with mock.patch.object(folder_paths, "open_below", wraps=folder_paths.open_below) as opens:
            self.assertEqual(self.listed(store, "zzz"), {})  # no candidate: no note opened to be offered
        self.assertEqual(
            [call.args[1] for call in opens.call_args_list].count(("sub",)), 1
        )  # four entries changed in it
        self.assertEqual(len(self.listed(store, "budget")), 4)

    def test_a_store_dropped_without_close_gives_its_inotify_instance_back(self) -> None:
        def held() -> int:
            fds = os.listdir("/proc/self/fd")
            return sum(1 for fd in fds if _link(fd) == "anon_inode:inotify")

        gc.collect()  # stores of earlier tests that are already unreachable
        before = held()
        nonces = sqlite_store.open_ledger(new_database(os.path.join(self.base, "dropped.db")), clock=self.clock)
        self.addCleanup(nonces.close)
        store = MarkdownNotesStore([self.ws], nonces, watch=True)
        self.listed(store, "TPS")
        self.assertEqual(held(), before + 1)
        del store
        gc.collect()
        self.assertEqual(held(), before)  # the kernel allows a user 128: a leak would end in rescanning

    def test_a_folder_created_renamed_and_removed_is_followed(self) -> None:
        store = self.indexed()
        index = self.index(store)
        self.assertEqual(self.listed(store, "TPS"), {})
        with mock.patch.object(index, "_rebuild", wraps=index._rebuild) as rebuilds:
            self.write("2025/q1/tps.md", "# TPS q1\n")
            self.assertEqual(self.listed(store, "TPS"), {"2025/q1/tps.md": "TPS q1"})
            os.rename(os.path.join(self.ws, "2025"), os.path.join(self.ws, "2026"))
            self.assertEqual(self.listed(store, "TPS"), {"2026/q1/tps.md": "TPS q1"})
            self.write("2026/q1/more.md", "# TPS more\n")  # the moved folder is still watched
            self.assertEqual(self.listed(store, "TPS"), {"2026/q1/tps.md": "TPS q1", "2026/q1/more.md": "TPS more"})
            shutil.rmtree(os.path.join(self.ws, "2026"))
            self.assertEqual(self.listed(store, "TPS"), {})
        self.assertEqual(rebuilds.call_count, 0)  # a sub-folder moving or going is followed from its parent's events
        self.assertEqual(index.folders.keys(), {()})

    def test_a_folder_whose_name_ends_in_md_is_walked_at_the_build_and_when_it_appears_later(self) -> None:
        self.write("archive.md/a.md", "# TPS a\n")
        store = self.indexed()
        self.assertEqual(self.listed(store, "TPS"), {"archive.md/a.md": "TPS a"})
        self.write("later.md/b.md", "# TPS b\n")
        self.assertEqual(self.listed(store, "TPS"), {"archive.md/a.md": "TPS a", "later.md/b.md": "TPS b"})

    def test_a_sub_folder_whose_attributes_change_is_not_listed_again(self) -> None:
        self.write("sub/a.md", "# TPS a\n")
        self.write("sub/b.md", "# TPS b\n")
        store = self.indexed()
        self.listed(store, "TPS")
        self.assertEqual(self.index(store).entries, 3)  # sub, sub/a.md, sub/b.md
        os.chmod(os.path.join(self.ws, "sub"), 0o750)  # an event for the entry "sub" of the root
        with mock.patch.object(folder_paths, "read_title", wraps=folder_paths.read_title) as reads:
            self.assertEqual(len(self.listed(store, "zzz")), 0)
        self.assertEqual(reads.call_count, 0)
        self.assertEqual(self.index(store).entries, 3)

    def test_a_folder_replaced_by_another_folder_of_the_same_name_is_listed_anew(self) -> None:
        self.write("2025/old.md", "# TPS old\n")
        self.write("staging/new.md", "# TPS new\n")
        store = self.indexed()
        self.assertEqual(sorted(self.listed(store, "TPS")), ["2025/old.md", "staging/new.md"])
        shutil.rmtree(os.path.join(self.ws, "2025"))
        os.rename(os.path.join(self.ws, "staging"), os.path.join(self.ws, "2025"))
        self.assertEqual(sorted(self.listed(store, "TPS")), ["2025/new.md"])
        self.write("2025/more.md", "# TPS more\n")  # the folder now at that name is the one watched
        self.assertEqual(sorted(self.listed(store, "TPS")), ["2025/more.md", "2025/new.md"])

    def test_dropped_title_slots_are_compacted_and_lookups_answer_the_same(self) -> None:
        for i in range(3):
            self.write(f"n{i}.md", f"# TPS {i}\n")
        store = self.indexed()
        index = self.index(store)
        self.listed(store, "TPS")  # built
        with (
            mock.patch.object(folder_index, "COMPACT_AFTER", 2),
            mock.patch.object(index, "_compact", wraps=index._compact) as compact,
        ):
            for round_ in range(4):  # each edit drops a slot and adds one
                for i in range(3):
                    self.write(f"n{i}.md", f"# TPS {i} v{round_}\n")
                self.assertEqual(sorted(self.listed(store, "TPS").values()), [f"TPS {i} v{round_}" for i in range(3)])
                self.assertLessEqual(index.dead, 3)  # compacted once more than max(COMPACT_AFTER, live) are dropped
                self.assertEqual(len(index.slot_path), len(index.files) + index.dead)
        self.assertGreaterEqual(compact.call_count, 2)

    def test_a_note_swapped_for_a_symlink_leaves_the_index_and_the_outside_file_is_never_listed(self) -> None:
        path = self.write("tps.md", "# TPS\n")
        store = self.indexed()
        self.assertEqual(list(self.listed(store, "TPS")), ["tps.md"])
        os.unlink(path)
        os.symlink(self.secret, path)
        self.assertEqual(self.listed(store, "TPS"), {})
        self.assertNotIn(("tps.md",), self.index(store).files)

    def test_a_notes_folder_configured_through_a_symlink_is_watched_at_its_target(self) -> None:
        link = os.path.join(self.base, "link-to-ws")
        os.symlink(self.ws, link)
        nonces = sqlite_store.open_ledger(new_database(os.path.join(self.base, "nonces.db")), clock=self.clock)
        store = MarkdownNotesStore([link], nonces, clock=lambda: self.ticks[0])
        self.addCleanup(store.close)
        root = main.parse_file_uri(store.workspace_uris()[0])
        self.assertEqual(store.candidates(root, "TPS"), [])
        self.write("sub/new.md", "# TPS new\n")
        self.assertEqual([n.id for n in store.candidates(root, "TPS")], ["sub/new.md"])  # seen without a rescan
        self.assertIsNotNone(self.index(store).watch)

    def test_a_notes_folder_removed_then_made_again_offers_nothing_of_either_and_says_so(self) -> None:
        self.write("a.md", "# TPS a\n")
        store = self.indexed()
        self.assertEqual(list(self.listed(store, "TPS")), ["a.md"])
        shutil.rmtree(self.ws)
        workspace = main.parse_file_uri(self.uri())
        self.assertEqual(self.index(store).candidates(workspace, "TPS"), [])  # its removal was seen: nothing left
        replaced = folder_paths.REPLACED.format(where=self.uri())
        with self.assertRaises(stores.StoreRefused) as caught:
            self.listed(store, "TPS")
        self.assertEqual(str(caught.exception), replaced)
        os.makedirs(self.ws)
        self.write("b.md", "# TPS b\n")
        self.ticks[0] += folder_index.RESCAN_SECONDS
        # Another folder at the path: the index reads only the folder opened at start-up.
        self.assertEqual(self.index(store).candidates(workspace, "TPS"), [])
        with self.assertRaises(stores.StoreRefused) as caught:
            self.listed(store, "TPS")
        self.assertEqual(str(caught.exception), replaced)

    def test_a_notes_folder_replaced_while_watched_is_refused_at_the_next_lookup(self) -> None:
        self.write("a.md", "# TPS a\n")
        store = self.indexed()
        self.listed(store, "TPS")
        shutil.rmtree(self.ws)
        os.makedirs(self.ws)
        self.write("b.md", "# TPS b\n")
        with self.assertRaises(stores.StoreRefused) as caught:
            self.listed(store, "TPS")
        self.assertEqual(str(caught.exception), folder_paths.REPLACED.format(where=self.uri()))

    def test_no_thread_is_started_by_building_or_keeping_the_index(self) -> None:
        before = threading.active_count()
        self.write("a.md", "# TPS a\n")
        store = self.indexed()
        self.listed(store, "TPS")
        self.write("b.md", "# TPS b\n")
        self.listed(store, "TPS")
        self.assertEqual(threading.active_count(), before)

    def test_the_watch_limit_on_both_sides(self) -> None:
        self.write("one/a.md", "# TPS a\n")
        self.write("two/b.md", "# TPS b\n")  # three folders: the root, one and two
        at_limit = self.indexed(max_watches=3)
        self.assertEqual(len(self.listed(at_limit, "TPS")), 2)
        self.assertIsNotNone(self.index(at_limit).watch)
        over = self.indexed(max_watches=2)
        self.assertEqual(len(self.listed(over, "TPS")), 2)
        self.assertIsNone(self.index(over).watch)
        self.assertIn(
            "changes found by a rescan at most every 2 s, or 10 times the last rescan's length if longer (more than "
            "2 folders to watch)",
            over.describe()[0],
        )
        self.assertEqual(folder_index.MAX_WATCHED_FOLDERS, 65_536)

    def test_the_entry_count_follows_each_change_so_the_limit_holds_between_rebuilds(self) -> None:
        for i in range(4):
            self.write(f"m{i}.md", "# TPS\n")
        store = self.indexed(max_walk_entries=5)
        self.assertEqual(len(self.listed(store, "TPS")), 4)
        os.unlink(os.path.join(self.ws, "m0.md"))
        self.write("n1.md", "# TPS\n")
        self.write("n2.md", "# TPS\n")  # 5 entries: at the limit, served
        self.assertEqual(len(self.listed(store, "TPS")), 5)
        self.assertEqual(self.index(store).entries, 5)
        self.write("n3.md", "# TPS\n")  # 6: over it
        with self.assertRaisesRegex(stores.StoreRefused, TOO_LARGE):
            self.listed(store, "TPS")

    def test_a_folder_over_the_entry_limit_at_its_first_lookup_is_refused_and_one_at_it_is_served(self) -> None:
        for i in range(4):
            self.write(f"m{i}.md", "# TPS\n")
        for watch in (True, False):
            with self.subTest(watch=watch):
                self.assertEqual(len(self.listed(self.indexed(watch=watch, max_walk_entries=4), "TPS")), 4)
                with self.assertRaisesRegex(stores.StoreRefused, TOO_LARGE):
                    self.listed(self.indexed(watch=watch, max_walk_entries=3), "TPS")

    def test_past_the_entry_limit_lookups_fail_then_serve_again_once_it_is_back_under(self) -> None:
        for i in range(4):
            self.write(f"m{i}.md", "# TPS\n")
        store = self.indexed(max_walk_entries=4)
        self.assertEqual(len(self.listed(store, "TPS")), 4)
        extra = self.write("m4.md", "# TPS\n")
        with self.assertRaisesRegex(stores.StoreRefused, TOO_LARGE):
            self.listed(store, "TPS")
        os.unlink(extra)
        with self.assertRaisesRegex(stores.StoreRefused, TOO_LARGE):
            self.listed(store, "TPS")  # not retried before RESCAN_SECONDS: a huge folder is not walked per call
        self.ticks[0] += folder_index.RESCAN_SECONDS
        self.assertEqual(len(self.listed(store, "TPS")), 4)


def _watches(index: folder_index.FolderIndex) -> int:
    """The kernel's count of the index's inotify watches (one "inotify wd:" line each in fdinfo)."""
    assert index.watch is not None
    with open(f"/proc/self/fdinfo/{index.watch.fd}", encoding="ascii") as info:
        return sum(1 for line in info if line.startswith("inotify wd:"))


BURST_BOUND = 1024  # MAX_EVENTS_PER_LOOKUP in the burst tests: far below the kernel's queue, whatever it is set to


class LostEvents(IndexCase):
    """A full kernel queue, or more changes than a lookup applies: a rebuild answers at once, one per lookup at most, no
    watch left behind."""

    def test_watches_stay_one_per_folder_after_five_queue_overflows_with_folders_moved_away(self) -> None:
        for i in range(10):
            self.write(f"f{i}/n.md", f"# TPS {i} r0\n")
        store = self.indexed()
        index = self.index(store)
        self.assertEqual(len(self.listed(store, "TPS")), 10)
        self.assertEqual(_watches(index), 11)  # the root and its ten folders
        away = os.path.join(self.base, "away")
        os.makedirs(away)
        for round_ in range(1, 6):
            overflow_queue(os.path.join(self.ws, "f0", "n.md"))
            # Lost with the queue full: the folders moved out keep their kernel watches
            # unless the index removes them.
            for i in range(10):
                os.rename(os.path.join(self.ws, f"f{i}"), os.path.join(away, f"r{round_}f{i}"))
                self.write(f"f{i}/n.md", f"# TPS {i} r{round_}\n")
            self.ticks[0] += folder_index.RESCAN_SECONDS
            with mock.patch.object(index, "_rebuild", wraps=index._rebuild) as rebuilds:
                listed = self.listed(store, "TPS")
            self.assertEqual(rebuilds.call_count, 1)  # the overflow was seen and answered
            self.assertEqual(sorted(listed.values()), [f"TPS {i} r{round_}" for i in range(10)])
            self.assertEqual(_watches(index), 11)
            self.assertEqual(len(index.by_wd), len(index.folders))
        self.write("f3/later.md", "# TPS later\n")  # still watched after the last rebuild
        self.assertIn("f3/later.md", self.listed(store, "TPS"))

    def test_a_note_created_after_a_queue_overflow_is_offered_by_notes_delete_at_the_next_call_without_waiting(
        self,
    ) -> None:
        self.write("a.md", "# TPS a\n")
        gone = self.write("gone.md", "# TPS gone\n")
        store = self.indexed()
        index = self.index(store)
        server = self.server(store)
        self.assertEqual(sorted(self.offered(self.ask(server))), ["a.md", "gone.md"])
        overflow_queue(os.path.join(self.ws, "a.md"))
        self.write("newborn.md", "# TPS newborn\n")
        os.unlink(gone)
        with mock.patch.object(index, "_rebuild", wraps=index._rebuild) as rebuilds:
            # The clock has not moved: no rescan is due, and the overflow alone brings the rebuild.
            self.assertEqual(sorted(self.offered(self.ask(server))), ["a.md", "newborn.md"])
            self.assertEqual(rebuilds.call_count, 1)
            self.assertFalse(index.lost)
            self.write("later.md", "# TPS later\n")  # events are applied again, without another rebuild
            self.assertEqual(sorted(self.offered(self.ask(server))), ["a.md", "later.md", "newborn.md"])
            self.assertEqual(rebuilds.call_count, 1)
        self.assertEqual(_watches(index), 1)

    def test_a_queue_overflowing_again_while_the_rebuild_walks_costs_one_rebuild_per_lookup_and_loses_no_note(
        self,
    ) -> None:
        self.write("a.md", "# TPS a\n")
        self.write("sub/b.md", "# TPS b\n")
        storm = [False]

        def listing(fd: int) -> Any:
            if storm[0] and os.fstat(fd).st_ino == os.stat(os.path.join(self.ws, "sub")).st_ino:
                storm[0] = False  # the root is listed: a note made now is known only by its event, which is lost
                self.write("during.md", "# TPS during\n")
                overflow_queue(os.path.join(self.ws, "a.md"))
            return os.scandir(fd)

        store = self.indexed(ops=folder_paths.OS_OPS._replace(scandir=listing))
        index = self.index(store)
        self.assertEqual(len(self.listed(store, "TPS")), 2)
        overflow_queue(os.path.join(self.ws, "a.md"))
        self.write("after.md", "# TPS after\n")
        storm[0] = True
        with mock.patch.object(index, "_rebuild", wraps=index._rebuild) as rebuilds:
            # Everything there before the lookup began is offered; during.md was made while it ran.
            self.assertTrue({"a.md", "sub/b.md", "after.md"} <= set(self.listed(store, "TPS")))
            self.assertEqual(rebuilds.call_count, 1)  # not one more: the next lookup rebuilds
            self.assertTrue(index.lost)
            self.assertEqual(sorted(self.listed(store, "TPS")), ["a.md", "after.md", "during.md", "sub/b.md"])
            self.assertEqual(rebuilds.call_count, 2)
        self.assertFalse(index.lost)

    def rename_burst(self, renames: int) -> None:
        """`renames` renames of one file between two names (two events each), then one to moved.md."""
        for k in range(renames):
            os.rename(os.path.join(self.ws, f"moving-{k % 2}.md"), os.path.join(self.ws, f"moving-{(k + 1) % 2}.md"))
        os.rename(os.path.join(self.ws, f"moving-{renames % 2}.md"), os.path.join(self.ws, "moved.md"))

    def test_a_burst_of_renames_of_one_file_is_read_once_looked_at_once_per_name_and_answered_right(self) -> None:
        self.write("keep.md", "# TPS keep\n")
        self.write("moving-0.md", "# TPS moving\n")
        store = self.indexed()
        index = self.index(store)
        self.listed(store, "TPS")
        self.rename_burst(BURST_BOUND // 2 - 1)  # exactly one lookup's worth of events
        assert index.watch is not None
        real, drained = index.watch.drain, []

        def counted(limit: int) -> list[tuple[int, int, str]]:
            drained.append(len(events := real(limit)))
            return events

        with (
            mock.patch.object(folder_index, "MAX_EVENTS_PER_LOOKUP", BURST_BOUND),
            mock.patch.object(index.watch, "drain", counted),
            mock.patch.object(index, "_refresh_entry", wraps=index._refresh_entry) as refresh,
            mock.patch.object(index, "_rebuild", wraps=index._rebuild) as rebuilds,
        ):
            self.assertEqual(self.listed(store, "TPS"), {"keep.md": "TPS keep", "moved.md": "TPS moving"})
        self.assertEqual(drained, [BURST_BOUND])
        # BURST_BOUND events, three names: each looked at once, and no rebuild.
        self.assertEqual(
            sorted(call.args[3] for call in refresh.call_args_list), ["moved.md", "moving-0.md", "moving-1.md"]
        )
        self.assertEqual(rebuilds.call_count, 0)
        self.assertFalse(index.lost)

    def test_more_events_queued_than_a_lookup_reads_are_answered_by_a_rebuild_at_that_lookup(self) -> None:
        self.write("keep.md", "# TPS keep\n")
        self.write("moving-0.md", "# TPS moving\n")
        store = self.indexed()
        index = self.index(store)
        self.listed(store, "TPS")
        self.rename_burst(BURST_BOUND // 2)  # two events past the bound
        with (
            mock.patch.object(folder_index, "MAX_EVENTS_PER_LOOKUP", BURST_BOUND),
            mock.patch.object(index, "_refresh_entry", wraps=index._refresh_entry) as refresh,
            mock.patch.object(index, "_rebuild", wraps=index._rebuild) as rebuilds,
        ):
            self.assertEqual(
                self.listed(store, "TPS"), {"keep.md": "TPS keep", "moved.md": "TPS moving"}
            )  # the clock has not moved
            self.assertEqual(rebuilds.call_count, 1)
            self.assertEqual(refresh.call_count, 0)  # the events read are not applied: the walk answers
            self.write("later.md", "# TPS later\n")  # the renewed watch sees changes again
            self.assertIn("later.md", self.listed(store, "TPS"))
            self.assertEqual(rebuilds.call_count, 1)
        self.assertFalse(index.lost)
        self.assertEqual(folder_index.MAX_EVENTS_PER_LOOKUP, 16_384)

    def test_changes_at_the_pending_bound_are_applied_and_one_more_is_answered_by_a_rebuild_at_that_lookup(
        self,
    ) -> None:
        self.write("a.md", "# TPS a\n")
        store = self.indexed()
        index = self.index(store)
        self.listed(store, "TPS")
        with (
            mock.patch.object(folder_index, "MAX_PENDING_CHANGES", 3),
            mock.patch.object(index, "_refresh_entry", wraps=index._refresh_entry) as refresh,
            mock.patch.object(index, "_rebuild", wraps=index._rebuild) as rebuilds,
        ):
            for name in ("b", "c", "d"):
                self.write(f"{name}.md", f"# TPS {name}\n")
            self.assertEqual(len(self.listed(store, "TPS")), 4)  # 3 changed entries, at the bound: each looked at
            self.assertEqual((refresh.call_count, rebuilds.call_count), (3, 0))
            for name in ("e", "f", "g", "h"):
                self.write(f"{name}.md", f"# TPS {name}\n")
            self.assertEqual(len(self.listed(store, "TPS")), 8)  # 4, past it: one rebuild instead
            self.assertEqual((refresh.call_count, rebuilds.call_count), (3, 1))
        self.assertFalse(index.lost)
        self.assertEqual(folder_index.MAX_PENDING_CHANGES, 4096)


STORM_FOLDERS = 6  # folders of the first-build storm test, each listed once by the walk
STORM_NOTES = 3  # notes made in every folder (and the root) each time the walk lists a folder


class FirstBuild(IndexCase):
    """Changes made while the first build walks: each one is seen by the lookup that built."""

    def test_notes_created_and_removed_while_the_first_build_walks_are_offered_and_dropped_by_that_lookup(self) -> None:
        folders = [""] + [f"d{k:02d}/" for k in range(STORM_FOLDERS)]
        for prefix in folders:
            for i in range(STORM_NOTES):
                self.write(f"{prefix}old-{i}.md", f"# TPS old {prefix}{i}\n")
        listings = [0]

        def storm(fd: int) -> Any:
            # Each listing of the walk begins by making notes in every folder, those already
            # listed among them, and removing one note made before from each.
            k = listings[0]
            listings[0] += 1
            for prefix in folders:
                for i in range(STORM_NOTES):
                    self.write(f"{prefix}new-{k}-{i}.md", f"# TPS new {prefix}{k}-{i}\n")
                if k < STORM_NOTES:
                    os.unlink(os.path.join(self.ws, f"{prefix}old-{k}.md"))
            return os.scandir(fd)

        store = self.indexed(ops=folder_paths.OS_OPS._replace(scandir=storm))
        found = self.listed(store, "TPS")
        self.assertEqual(listings[0], len(folders))  # one walk, each folder listed once
        truth = self.notes_on_disk()
        self.assertEqual(
            len(truth), len(folders) * (len(folders) * STORM_NOTES + STORM_NOTES) - len(folders) * STORM_NOTES
        )
        self.assertEqual(sorted(found), sorted(truth))
        self.assertEqual(self.listed(store, "TPS"), found)  # and the next lookup says the same

    def test_changes_made_while_the_first_build_walks_past_what_one_lookup_applies_are_applied_by_a_rebuild_at_the_next(
        self,
    ) -> None:
        self.write("a.md", "# TPS a\n")
        self.write("sub/b.md", "# TPS b\n")
        made = [False]

        def storm(fd: int) -> Any:
            if not made[0] and os.fstat(fd).st_ino == os.stat(os.path.join(self.ws, "sub")).st_ino:
                made[0] = True  # the root is listed: these are known by their events only
                for i in range(4):
                    self.write(f"during-{i}.md", f"# TPS during {i}\n")
            return os.scandir(fd)

        store = self.indexed(ops=folder_paths.OS_OPS._replace(scandir=storm))
        index = self.index(store)
        with (
            mock.patch.object(folder_index, "MAX_PENDING_CHANGES", 3),
            mock.patch.object(index, "_rebuild", wraps=index._rebuild) as rebuilds,
        ):
            self.assertTrue({"a.md", "sub/b.md"} <= set(self.listed(store, "TPS")))
            self.assertEqual(rebuilds.call_count, 1)  # the build: one rebuild per lookup at most
            self.assertTrue(index.lost)
            self.assertEqual(
                sorted(self.listed(store, "TPS")), ["a.md", *(f"during-{i}.md" for i in range(4)), "sub/b.md"]
            )
            self.assertEqual(rebuilds.call_count, 2)
        self.assertFalse(index.lost)

    def notes_on_disk(self) -> list[str]:
        """The id of every `*.md` file below the notes folder, read from the disk."""
        return [
            os.path.relpath(os.path.join(folder, name), self.ws)
            for folder, _, names in os.walk(self.ws)
            for name in names
            if name.endswith(".md")
        ]


class RescanFallback(IndexCase):
    watch = False

    def test_the_start_up_line_says_the_index_rescans_and_why(self) -> None:
        line = self.indexed().describe()[0]
        self.assertIn(
            "changes found by a rescan at most every 2 s, or 10 times the last rescan's length if longer (change "
            "notification off)",
            line,
        )

    def test_without_inotify_the_index_rescans_when_due_and_reads_only_changed_files(self) -> None:
        self.write("a.md", "# TPS a\n")
        store = self.indexed()
        self.assertEqual(list(self.listed(store, "TPS")), ["a.md"])
        self.write("b.md", "# TPS b\n")
        self.assertEqual(list(self.listed(store, "TPS")), ["a.md"])  # not due yet: b is not known
        self.ticks[0] += folder_index.RESCAN_SECONDS
        with mock.patch.object(folder_paths, "read_title", wraps=folder_paths.read_title) as reads:
            self.assertEqual(self.listed(store, "zzz"), {})
        self.assertEqual([call.args[1] for call in reads.call_args_list], ["b.md"])
        self.assertEqual(sorted(self.listed(store, "TPS")), ["a.md", "b.md"])

    def test_a_rescan_that_takes_long_is_next_due_only_after_ten_times_its_length(self) -> None:
        for name in ("a.md", "sub/b.md", "sub/deeper/c.md"):
            self.write(name, f"# TPS {name}\n")
        slow = [True]  # the first walk only

        def slow_listing(fd: int) -> Any:
            if slow[0]:
                self.ticks[0] += 1.0  # each folder takes a second to list: the walk takes 3 s
            return os.scandir(fd)

        store = self.indexed(ops=folder_paths.OS_OPS._replace(scandir=slow_listing))
        self.assertEqual(len(self.listed(store, "TPS")), 3)
        slow[0] = False
        started = self.ticks[0] - 3.0
        self.assertEqual(self.index(store).rescan_interval, folder_index.RESCAN_COST_FACTOR * 3.0)
        self.write("d.md", "# TPS d\n")
        self.ticks[0] = started + folder_index.RESCAN_COST_FACTOR * 3.0 - 0.5
        self.assertNotIn("d.md", self.listed(store, "TPS"))  # not due: the last rescan's length sets the pace
        self.ticks[0] = started + folder_index.RESCAN_COST_FACTOR * 3.0
        self.assertIn("d.md", self.listed(store, "TPS"))
        self.assertEqual(self.index(store).rescan_interval, folder_index.RESCAN_SECONDS)  # that one took no time

    def test_a_rescan_keeps_the_slot_of_every_unchanged_file_and_retires_the_changed_ones(self) -> None:
        self.write("a.md", "# TPS a\n")
        edited = self.write("b.md", "# TPS b\n")
        gone = self.write("c.md", "# TPS c\n")
        store = self.indexed()
        self.listed(store, "TPS")
        index = self.index(store)
        before = dict(index.files)
        self.write_at(edited, "# Budget b\n")
        os.unlink(gone)
        self.ticks[0] += folder_index.RESCAN_SECONDS
        self.assertEqual(self.listed(store, "TPS"), {"a.md": "TPS a"})
        self.assertEqual(index.files[("a.md",)], before[("a.md",)])  # same facts, same slot
        self.assertNotEqual(index.files[("b.md",)][1], before[("b.md",)][1])
        self.assertNotIn(("c.md",), index.files)
        self.assertEqual(
            {path: index.slot_path[slot] for path, (_, slot) in before.items()},
            {("a.md",): ("a.md",), ("b.md",): None, ("c.md",): None},
        )
        self.assertEqual(index.dead, 2)
        self.assertEqual(self.listed(store, "budget"), {"b.md": "Budget b"})

    def test_a_title_edited_before_the_rescan_is_offered_for_what_the_file_says_now(self) -> None:
        path = self.write("a.md", "# TPS a\n")
        store = self.indexed()
        self.listed(store, "TPS")
        self.write_at(path, "# Budget\n")
        self.assertEqual(self.listed(store, "TPS"), {})  # the index still says TPS; the file is read again
        self.assertNotEqual(self.indexed_facts(store, "a.md"), folder_paths.facts(os.stat(path)))  # not yet updated

    def test_a_note_removed_or_replaced_by_a_fifo_before_the_rescan_is_not_offered(self) -> None:
        for change in ("removed", "fifo"):
            with self.subTest(change=change):
                path = self.write(f"{change}/tps-a.md", "# TPS a\n")
                self.write(f"{change}/tps-b.md", "# TPS b\n")
                store = self.indexed()
                self.assertEqual(len(self.listed(store, "TPS", change)), 2)
                os.unlink(path)
                if change == "fifo":
                    os.mkfifo(path)  # titled "tps-a" by its name if it were read as a note
                # The index still holds tps-a.md; reading it finds nothing, or no note.
                self.assertEqual(self.listed(store, "TPS", change), {f"{change}/tps-b.md": "TPS b"})

    def test_more_matches_than_a_form_can_offer_are_counted_from_the_index_without_reading_them(self) -> None:
        count = main.MAX_CANDIDATES + 1
        for i in range(count):
            self.write(f"n{i:02}.md", f"# TPS {i:02}\n")
        store = self.indexed()
        self.listed(store, "zzz")  # built
        with mock.patch.object(folder_paths, "read_title", wraps=folder_paths.read_title) as reads:
            self.assertEqual(len(self.listed(store, "TPS")), count)
        self.assertEqual(reads.call_count, 0)
        self.write("n00.md", "# Budget\n")  # at the limit: each is read again, and offered for what it says now
        self.ticks[0] += folder_index.RESCAN_SECONDS
        with mock.patch.object(folder_paths, "read_title", wraps=folder_paths.read_title) as reads:
            self.assertEqual(len(self.listed(store, "TPS")), main.MAX_CANDIDATES)
        self.assertEqual(reads.call_count, main.MAX_CANDIDATES + 1)  # n00 read by the rescan, the 25 before the offer

    def test_more_matches_than_a_form_can_offer_still_come_from_the_workspace_only(self) -> None:
        for i in range(main.MAX_CANDIDATES + 1):
            self.write(f"other/n{i:02}.md", f"# TPS {i:02}\n")  # as deep as the workspace's own
            self.write(f"sub/s{i:02}.md", f"# TPS sub {i:02}\n")
        store = self.indexed()
        found = self.listed(store, "TPS", "sub")
        self.assertEqual(len(found), main.MAX_CANDIDATES + 1)
        self.assertTrue(all(ident.startswith("sub/") for ident in found))
        self.assertEqual(len(self.listed(store, "TPS")), 2 * (main.MAX_CANDIDATES + 1))

    def test_titles_holding_the_rarest_trigrams_but_not_the_query_are_not_counted_past_a_form(self) -> None:
        # The query's two rarest trigrams ("abc", "xyz") are in every decoy, its others
        # ("bcx", "cxy") are common elsewhere: only the exact test tells the decoys out.
        for i in range(main.MAX_CANDIDATES + 1):
            self.write(f"decoy{i:02}.md", f"# abc xyz {i:02}\n")
        for i in range(3 * main.MAX_CANDIDATES):
            self.write(f"filler{i:02}.md", f"# bcxy {i:02}\n")
        self.write("match.md", "# abcxyz\n")
        store = self.indexed()
        self.assertEqual(self.listed(store, "abcxyz"), {"match.md": "abcxyz"})

    def test_inotify_that_cannot_start_falls_back_to_rescanning_and_says_why(self) -> None:
        with mock.patch.object(folder_index.change_watch, "Inotify", side_effect=OSError(24, "Too many open files")):
            store = self.indexed(watch=True)
        self.assertIn("(inotify unavailable: Too many open files)", store.describe()[0])
        self.write("a.md", "# TPS a\n")
        self.assertEqual(list(self.listed(store, "TPS")), ["a.md"])


class StaleIndexAtTheAccept(IndexCase):
    """Between the form and the accept the file changes; the index has not caught up. Nothing else is ever deleted."""

    def setUp(self) -> None:
        super().setUp()
        self.chosen = self.write("2025/tps.md", "# TPS report 2025\n")
        self.other = self.write("tps-2024.md", "# TPS report 2024\n")
        self.store_ = self.indexed()
        self.server_ = self.server(self.store_)
        self.first = self.ask(self.server_)
        self.assertEqual(self.offered(self.first), ["tps-2024.md", "2025/tps.md"])
        self.shown = self.indexed_facts(self.store_, "2025", "tps.md")

    def accept_chosen(self) -> dict[str, Any]:
        # No lookup ran since the change: the index still holds what the form showed.
        self.assertEqual(self.indexed_facts(self.store_, "2025", "tps.md"), self.shown)
        return self.answer(self.server_, self.first, accept("2025/tps.md"))

    def test_a_title_edited_is_not_deleted(self) -> None:
        self.write_at(self.chosen, "# Quarterly numbers\n")
        before = self.tree()
        self.refused_as_changed(self.accept_chosen())
        self.assertEqual(self.tree(), before)
        with open(self.chosen, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "# Quarterly numbers\n")

    def test_a_file_renamed_away_deletes_nothing_under_either_name(self) -> None:
        os.rename(self.chosen, os.path.join(self.ws, "2025", "renamed.md"))
        self.write_at(self.chosen + ".txt", "not a note\n")
        before = self.tree()
        self.refused_as_changed(self.accept_chosen())
        self.assertEqual(self.tree(), before)

    def test_a_file_replaced_by_another_note_of_the_same_title_is_not_deleted(self) -> None:
        os.rename(self.other, self.chosen)  # the other note now sits at the chosen name
        before = self.tree()
        self.refused_as_changed(self.accept_chosen())
        self.assertEqual(self.tree(), before)
        with open(self.chosen, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "# TPS report 2024\n")

    def test_a_file_swapped_for_a_symlink_to_outside_deletes_neither_the_link_nor_its_target(self) -> None:
        os.unlink(self.chosen)
        os.symlink(self.secret, self.chosen)
        before = self.tree()
        self.refused_as_changed(self.accept_chosen())
        self.assertEqual(self.tree(), before)
        self.assertTrue(os.path.islink(self.chosen))
        self.assertSecretIntact()

    def test_after_the_refusal_the_next_lookup_offers_the_live_files_and_the_chosen_one_can_be_deleted(self) -> None:
        self.write_at(self.chosen, "# TPS report 2025 (revised)\n")
        self.refused_as_changed(self.accept_chosen())
        again = self.ask(self.server_)  # asks again: the index catches up, the form shows the file as it is
        self.assertEqual(self.offered(again), ["tps-2024.md", "2025/tps.md"])
        done = self.answer(self.server_, again, accept("2025/tps.md"))
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "2025/tps.md"})
        self.assertTrue(os.path.exists(self.other))


class StaleIndexAtTheAcceptWhileRescanning(StaleIndexAtTheAccept):
    watch = False  # the rescan is not due: the clock does not move


class TitleCost(IndexCase):
    """What one title may cost the index: at most one posting per bucket of its trigrams, none past the indexed
    length."""

    def postings(self, index: folder_index.FolderIndex, slot: int) -> int:
        return sum(1 for posting in index.grams.values() if slot in posting)

    def test_titles_at_and_past_the_indexed_length_are_found_by_any_part_and_only_the_first_is_indexed(self) -> None:
        at, past = bounded_titles()
        self.write("at.md", f"# {at}\n")
        self.write("sub/past.md", f"# {past}\n")
        self.write("other.md", "# TPS other\n")
        store = self.indexed()
        for title, rel in ((at, "at.md"), (past, "sub/past.md")):
            for query in parts(title):
                self.assertEqual(self.listed(store, query), {rel: title})
        index = self.index(store)
        at_slot, past_slot = index.files[("at.md",)][1], index.files[("sub", "past.md")][1]
        trigrams = len(title_index.trigrams(stores.fold_title(at)))
        self.assertLessEqual(trigrams, title_index.MAX_INDEXED_TITLE_CHARS - 2)
        self.assertLessEqual(self.postings(index, at_slot), trigrams)  # one per bucket its trigrams fall in
        self.assertGreater(self.postings(index, at_slot), trigrams // 2)
        self.assertEqual(self.postings(index, past_slot), 0)  # kept off the lists ...
        self.assertEqual(index.unindexed, {past_slot})  # ... and tested by every lookup
        os.unlink(os.path.join(self.ws, "sub", "past.md"))
        self.assertEqual(self.listed(store, past[:5]), {})
        self.assertEqual(index.unindexed, set())

    def test_posting_lists_never_outnumber_the_buckets_and_shared_buckets_lose_no_match(self) -> None:
        rng = random.Random(7)
        titles = ["".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(190)) for _ in range(30)]
        for i, title in enumerate(titles):
            self.write(f"c{i:02d}.md", f"# {title}\n")
        for buckets in (1, 4, folder_index.TRIGRAM_BUCKETS):
            with self.subTest(buckets=buckets), mock.patch.object(folder_index, "TRIGRAM_BUCKETS", buckets):
                store = self.indexed()
                for i in (0, 17, 29):
                    self.assertEqual(self.listed(store, titles[i][60:70]), {f"c{i:02d}.md": titles[i]})
                index = self.index(store)
                self.assertLessEqual(len(index.grams), buckets)
                held = sum(len(posting) for posting in index.grams.values())
                self.assertLessEqual(held, len(titles) * 188)  # 4 bytes each: at most 752 bytes of postings per note
                self.assertEqual(held, sum(self.postings(index, slot) for slot in range(len(titles))))
        self.assertEqual(folder_index.TRIGRAM_BUCKETS, 65_536)


class EventQueue(unittest.TestCase):
    """change_watch.Inotify.drain: what one call reads of the kernel's queue."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="inotify-", dir=SCRATCH)
        self.addCleanup(tmp.cleanup)
        self.folder = tmp.name
        self.watch = change_watch.Inotify()
        self.addCleanup(self.watch.close)
        self.wd = self.watch.add(self.folder)

    def touch(self, name: str) -> str:
        path = os.path.join(self.folder, name)
        with open(path, "w", encoding="utf-8"):
            pass  # IN_CREATE, then IN_CLOSE_WRITE
        return path

    def test_a_drain_takes_the_events_queued_when_it_began_and_those_queued_during_it_wait_for_the_next(self) -> None:
        self.touch("before.md")
        real = os.read

        def read_while_a_file_is_made(fd: int, size: int) -> bytes:
            self.touch("during.md")  # queued after the call began: read by this same read(), held back
            return real(fd, size)

        with mock.patch.object(change_watch.os, "read", read_while_a_file_is_made):
            first = self.watch.drain(100)
        self.assertEqual([name for _, _, name in first], ["before.md", "before.md"])
        self.assertFalse(self.watch.behind())
        self.assertEqual([name for _, _, name in self.watch.drain(100)], ["during.md", "during.md"])
        self.assertEqual(self.watch.drain(100), [])

    def test_a_drain_takes_at_most_its_limit_and_says_it_left_some(self) -> None:
        for name in ("a.md", "b.md"):
            self.touch(name)  # four events
        self.assertEqual(len(self.watch.drain(4)), 4)
        self.assertFalse(self.watch.behind())
        self.touch("c.md")
        self.touch("d.md")
        self.assertEqual([name for _, _, name in self.watch.drain(3)], ["c.md", "c.md", "d.md"])
        self.assertTrue(self.watch.behind())

    def test_a_queue_holding_more_bytes_than_the_limits_events_can_fill_is_not_read(self) -> None:
        for i in range(5):
            self.touch(f"{i}.md")
        with mock.patch.object(change_watch.os, "read", wraps=os.read) as reads:
            # Ten events of 32 bytes: more than one event of the longest name (272 bytes) holds.
            self.assertEqual(self.watch.drain(1), [])
        self.assertEqual(reads.call_count, 0)
        self.assertTrue(self.watch.behind())
        self.assertEqual(len(self.watch.drain(10)), 10)  # still queued

    def test_a_queue_of_exactly_its_limits_events_of_the_longest_name_is_read(self) -> None:
        longest = "n" * (folder_paths.NAME_MAX - 3) + ".md"  # 255 bytes: each event 16 + 256 bytes
        self.touch(longest)  # two events
        self.assertEqual([name for _, _, name in self.watch.drain(2)], [longest, longest])
        self.assertFalse(self.watch.behind())

    def test_the_watched_folder_removed_gives_its_nameless_events_the_last_one_included(self) -> None:
        os.rmdir(self.folder)
        self.assertEqual(
            self.watch.drain(100), [(self.wd, change_watch.IN_DELETE_SELF, ""), (self.wd, change_watch.IN_IGNORED, "")]
        )
        os.makedirs(self.folder)  # for the cleanup

    def test_an_overflowed_queue_is_answered_with_its_overflow_event_alone_and_the_next_events_follow(self) -> None:
        path = self.touch("a.md")
        overflow_queue(path)
        self.assertEqual(self.watch.drain(_above_the_kernels_queue()), [(-1, change_watch.IN_Q_OVERFLOW, "")])
        self.assertFalse(self.watch.behind())
        self.touch("after.md")
        self.assertEqual([name for _, _, name in self.watch.drain(100)], ["after.md", "after.md"])


def _above_the_kernels_queue() -> int:
    """A drain limit above the kernel's queue length: the overflow is seen however many events it holds."""
    with open("/proc/sys/fs/inotify/max_queued_events", encoding="ascii") as limit:
        return int(limit.read()) + 1


class Bounds(unittest.TestCase):
    def test_a_folder_of_100000_notes_is_within_the_entry_limit(self) -> None:
        # 100,000 notes in 1,000 sub-folders: 101,000 entries, and room for ten times more.
        self.assertGreaterEqual(folder_paths.MAX_WALK_ENTRIES, 1_000_000)


if __name__ == "__main__":
    unittest.main()
