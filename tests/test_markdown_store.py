"""Markdown folder store: the OS, not the URI string, keeps listing and deletion inside the folder."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import tempfile
import unicodedata
import unittest
from collections.abc import Callable
from typing import Any
from unittest import mock

from helpers import procs, races
from helpers.sql_stores import SCRATCH, new_database
from helpers.support import KEY, PRINCIPAL, Clock, Log, accept, call

import audit
import folder_paths
import folder_trash
import frame
import ledger
import main
import sqlite_store
import stores
import test_folder_swap
from markdown_store import MarkdownNotesStore

ALWAYS = lambda note: True  # noqa: E731 - a recheck that accepts every live note
SECRET = "# TPS report (outside)\nmust survive\n"
STRESS_TRIES = 200  # raced deletions in the exchange stress test


def ledger_db(store: MarkdownNotesStore) -> sqlite_store.SqliteDatabase:
    """The SQLite database the folder store's ledger writes through (its confirmation database)."""
    sql = store.nonces
    assert isinstance(sql, ledger.SqlLedger) and isinstance(sql.db, sqlite_store.SqliteDatabase)
    return sql.db


class FolderCase(unittest.TestCase):
    """A temporary tree: base/ws is the notes folder, base/outside must never be touched."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="md-store-", dir=SCRATCH)
        self.addCleanup(tmp.cleanup)
        self.base = tmp.name
        self.ws = os.path.join(self.base, "ws")
        self.outside = os.path.join(self.base, "outside")
        os.makedirs(self.ws)
        os.makedirs(self.outside)
        self.secret = self.write_at(os.path.join(self.outside, "secret.md"), SECRET)
        self.clock = Clock()
        self.log = Log()

    def write(self, rel: str, text: str = "") -> str:
        return self.write_at(os.path.join(self.ws, rel), text)

    @staticmethod
    def write_at(path: str, text: str) -> str:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def store(
        self,
        roots: list[str] | None = None,
        deletion: str = audit.DELETION_TRASH,
        ops: folder_paths.FileOps = folder_paths.OS_OPS,
    ) -> MarkdownNotesStore:
        nonces = sqlite_store.open_ledger(new_database(os.path.join(self.base, "nonces.db")), clock=self.clock)
        self.addCleanup(nonces.close)
        store = MarkdownNotesStore(roots or [self.ws], nonces, retention=audit.Retention(deletion=deletion), ops=ops)
        self.addCleanup(store.close)
        return store

    def server(self, store: MarkdownNotesStore | None = None) -> frame.Server:
        store = store or self.store()
        return frame.notes_server(
            keys=[KEY],
            notes=store,
            policy=main.AuthorizationPolicy({PRINCIPAL: store.workspace_uris()}),
            clock=self.clock,
            log=self.log,
        )

    def uri(self, *below: str) -> str:
        return main.format_file_uri(tuple(p for p in self.ws.split("/") if p) + below)

    def listed(self, store: MarkdownNotesStore, title: str = "", *below: str) -> dict[str, str]:
        """id -> title of every note offered for `title` in ws/below."""
        workspace = main.parse_file_uri(self.uri(*below))
        return {note.id: note.title for note in store.candidates(workspace, title)}

    def ask(self, server: frame.Server, title: str = "TPS", workspace: str | None = None) -> dict[str, Any]:
        response = server.handle(call({"workspaceUri": workspace or self.uri(), "title": title}), PRINCIPAL)
        assert response is not None
        return response

    def answer(
        self, server: frame.Server, first: dict[str, Any], responses: dict[str, Any], title: str = "TPS"
    ) -> dict[str, Any]:
        response = server.handle(
            call(
                {"workspaceUri": self.uri(), "title": title},
                id=2,
                requestState=first["result"]["requestState"],
                inputResponses=responses,
            ),
            PRINCIPAL,
        )
        assert response is not None
        return response

    @staticmethod
    def offered(first: dict[str, Any]) -> list[str]:
        schema = first["result"]["inputRequests"][main.INPUT_KEY]["params"]["requestedSchema"]
        return [option["const"] for option in schema["properties"]["note_id"]["oneOf"]]

    def tree(self) -> set[str]:
        """Every path (files, links, folders) under base except the nonce database and the trash."""
        found = set()
        for folder, dirs, files in os.walk(self.base):
            for name in dirs + files:
                rel = os.path.relpath(os.path.join(folder, name), self.base)
                if not rel.startswith("nonces.db") and not rel.startswith(os.path.join("ws", folder_trash.TRASH_DIR)):
                    found.add(rel)
        return found

    def trashed(self) -> list[str]:
        """Names in ws/.trash (none when it does not exist)."""
        trash = os.path.join(self.ws, folder_trash.TRASH_DIR)
        return sorted(os.listdir(trash)) if os.path.isdir(trash) else []

    def assertSecretIntact(self) -> None:
        with open(self.secret, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), SECRET)


class ListingTests(FolderCase):
    def test_md_files_in_sub_folders_are_notes_titled_by_heading_or_file_name(self) -> None:
        self.write("tps-2024.md", "intro\n\n# TPS report 2024\nbody")
        self.write("2025/q1 TPS.md", "no heading here")
        self.write("2025/readme.txt", "# TPS not a note")
        self.assertEqual(self.listed(self.store()), {"tps-2024.md": "TPS report 2024", "2025/q1 TPS.md": "q1 TPS"})

    def test_note_id_is_the_path_below_the_folder_and_stable_across_listings(self) -> None:
        self.write("Été/plan B.md", "# Plan")
        store = self.store()
        (note,) = store.candidates(main.parse_file_uri(self.uri()), "plan")
        self.assertEqual(note.id, "Été/plan B.md")
        self.assertEqual(note.uri, self.uri("Été", "plan B.md"))
        self.assertEqual(store.candidates(main.parse_file_uri(self.uri()), "plan"), [note])

    def test_a_sub_folder_workspace_lists_only_its_own_notes_with_the_same_ids(self) -> None:
        self.write("a/TPS.md")
        self.write("b/TPS.md")
        self.assertEqual(self.listed(self.store(), "TPS", "a"), {"a/TPS.md": "TPS"})

    def test_symlinks_to_outside_files_and_folders_are_never_listed(self) -> None:
        self.write("real.md", "# TPS real")
        os.symlink(self.secret, os.path.join(self.ws, "link.md"))
        os.symlink(self.outside, os.path.join(self.ws, "linked-folder"))
        self.assertEqual(self.listed(self.store()), {"real.md": "TPS real"})
        self.assertSecretIntact()

    def test_a_file_with_a_second_hard_link_is_not_offered_until_it_has_one_again(self) -> None:
        self.write("real.md", "# TPS real")
        os.link(self.secret, os.path.join(self.ws, "linked.md"))  # an outside file linked in
        self.assertEqual(self.listed(self.store()), {"real.md": "TPS real"})  # its heading is not shown
        self.assertSecretIntact()
        os.unlink(self.secret)  # now the folder's entry is the only name of the file
        self.assertEqual(self.listed(self.store()), {"real.md": "TPS real", "linked.md": "TPS report (outside)"})

    def test_a_symlinked_folder_named_in_the_workspace_uri_is_refused(self) -> None:
        os.symlink(self.outside, os.path.join(self.ws, "sub"))
        with self.assertRaises(stores.StoreRefused):
            self.listed(self.store(), "", "sub")
        response = self.ask(self.server(), "TPS", self.uri("sub"))
        self.assertTrue(response["result"]["isError"])
        self.assertNotIn("requestState", response["result"])
        self.assertNotIn("outside", response["result"]["content"][0]["text"])

    def test_fifos_hidden_entries_and_folders_named_md_are_not_notes(self) -> None:
        self.write("note.md", "# Kept")
        os.mkfifo(os.path.join(self.ws, "pipe.md"))  # opening it without O_NONBLOCK would hang
        self.write(".hidden.md", "# Hidden")
        self.write(".obsidian/workspace.md", "# Hidden folder")
        os.makedirs(os.path.join(self.ws, "folder.md"))
        self.assertEqual(self.listed(self.store()), {"note.md": "Kept"})

    def test_names_a_file_uri_cannot_spell_are_skipped_and_the_rest_still_listed(self) -> None:
        self.write("ok.md", "# OK")
        for name in ("100%.md", "back\\slash.md", "new\nline.md"):
            self.write(name, "# Bad")
        fd = os.open(os.path.join(self.ws, "").encode() + b"caf\xe9.md", os.O_CREAT | os.O_WRONLY)  # not UTF-8
        os.close(fd)
        self.assertEqual(self.listed(self.store()), {"ok.md": "OK"})

    def test_heading_is_read_only_from_the_scan_prefix(self) -> None:
        line = "# Inside\n"
        self.write("inside.md", "x" * (folder_paths.TITLE_SCAN_BYTES - len(line) - 1) + "\n" + line)
        self.write(
            "beyond.md", "x" * (folder_paths.TITLE_SCAN_BYTES - len(line)) + "\n" + line
        )  # its newline falls one byte past the prefix
        self.assertEqual(self.listed(self.store()), {"inside.md": "Inside", "beyond.md": "beyond"})

    def test_code_fences_sub_headings_and_hashtags_are_not_titles(self) -> None:
        self.write("fenced.md", "```sh\n# comment\n```\n## Sub\n#tag\n# Real title\n")
        self.assertEqual(self.listed(self.store()), {"fenced.md": "Real title"})

    def test_control_and_bidi_characters_in_a_heading_are_blanked(self) -> None:
        self.write("spoof.md", "# Shopping\u202e dm.secnarf\x1b[2J list\n")
        (title,) = self.listed(self.store()).values()
        self.assertEqual(title, "Shopping  dm.secnarf [2J list")

    def test_note_id_length_limit_on_both_sides(self) -> None:
        at = "a" * (stores.MAX_NOTE_ID_LENGTH - 3) + ".md"
        over = "b" * (stores.MAX_NOTE_ID_LENGTH - 2) + ".md"
        self.write(at)
        self.write(over)
        self.assertEqual(list(self.listed(self.store())), [at])

    def test_walk_depth_limit_on_both_sides(self) -> None:
        deepest = "/".join(f"d{i}" for i in range(folder_paths.MAX_WALK_DEPTH))
        self.write(deepest + "/at.md")
        self.write(deepest + "/d/over.md")
        self.assertEqual(list(self.listed(self.store())), [deepest + "/at.md"])


class DeletionTests(FolderCase):
    def setUp(self) -> None:
        super().setUp()
        self.chosen = self.write("2025/tps.md", "# TPS report 2025\n")
        self.other = self.write("tps-2024.md", "# TPS report 2024\n")

    def test_full_mrtr_flow_over_a_real_folder_deletes_exactly_the_chosen_file(self) -> None:
        server = self.server()
        before = self.tree()
        first = self.ask(server)
        self.assertEqual(first["result"]["resultType"], "input_required")
        self.assertEqual(self.offered(first), ["tps-2024.md", "2025/tps.md"])
        done = self.answer(server, first, accept("2025/tps.md"))
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "2025/tps.md"})
        self.assertEqual(self.tree(), before - {"ws/2025/tps.md"})
        self.assertEqual(len(self.trashed()), 1)
        self.assertTrue(self.trashed()[0].endswith("-tps.md"))
        replay = self.answer(server, first, accept("2025/tps.md"))
        self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.tree(), before - {"ws/2025/tps.md"})
        self.assertEqual(len(self.trashed()), 1)
        self.assertSecretIntact()

    def test_confirmed_file_swapped_for_a_symlink_to_an_outside_file_deletes_nothing(self) -> None:
        server = self.server()
        first = self.ask(server)
        os.symlink(self.secret, self.chosen + ".tmp")
        os.replace(self.chosen + ".tmp", self.chosen)
        before = self.tree()
        result = self.answer(server, first, accept("2025/tps.md"))["result"]
        self.assertTrue(result["isError"])
        self.assertEqual(self.tree(), before)
        self.assertTrue(os.path.islink(self.chosen))
        self.assertSecretIntact()
        self.assertEqual(self.answer(server, first, accept("2025/tps.md"))["error"]["code"], main.INVALID_PARAMS)

    def test_a_confirmed_file_given_a_second_hard_link_is_not_deleted(self) -> None:
        server = self.server()
        first = self.ask(server)
        os.link(self.chosen, os.path.join(self.outside, "kept.md"))  # deleting here would not delete it
        before = self.tree()
        result = self.answer(server, first, accept("2025/tps.md"))["result"]
        self.assertTrue(result["isError"])
        self.assertEqual(self.tree(), before)
        self.assertTrue(os.path.exists(self.chosen))
        self.assertSecretIntact()

    def test_confirmed_file_replaced_by_an_identical_copy_with_the_same_mtime_deletes_nothing(self) -> None:
        server = self.server()
        first = self.ask(server)
        old = os.stat(self.chosen)
        self.write_at(self.chosen + ".tmp", "# TPS report 2025\n")
        os.utime(self.chosen + ".tmp", ns=(old.st_atime_ns, old.st_mtime_ns))
        os.replace(self.chosen + ".tmp", self.chosen)  # same name, size, mtime; new inode and ctime
        before = self.tree()
        self.assertTrue(self.answer(server, first, accept("2025/tps.md"))["result"]["isError"])
        self.assertEqual(self.tree(), before)

    def test_confirmed_folder_swapped_for_a_symlink_to_an_outside_folder_deletes_nothing(self) -> None:
        server = self.server()
        first = self.ask(server)
        self.write_at(os.path.join(self.outside, "tps.md"), "# TPS report 2025\n")
        os.rename(os.path.join(self.ws, "2025"), os.path.join(self.ws, "2025-moved"))
        os.symlink(self.outside, os.path.join(self.ws, "2025"))
        before = self.tree()
        self.assertTrue(self.answer(server, first, accept("2025/tps.md"))["result"]["isError"])
        self.assertEqual(self.tree(), before)
        self.assertSecretIntact()

    def test_a_symlink_is_not_deleted_even_with_a_version_forged_for_its_target(self) -> None:
        os.symlink(self.secret, os.path.join(self.ws, "link.md"))
        store = self.store()
        root = store.roots[0]
        # The version the outside file would have if the link were followed.
        fd = os.open(self.outside, os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, fd)
        loaded = folder_paths.load_note(fd, "secret.md", root, ("link.md",))
        assert loaded is not None
        before = self.tree()
        outcome = store.consume(PRINCIPAL, "n1", self.clock.now + 60, ("link.md", loaded[0].version), ALWAYS)
        self.assertIs(outcome, main.Settlement.CHANGED)
        self.assertEqual(self.tree(), before)
        self.assertSecretIntact()

    def test_ids_this_store_could_not_have_issued_delete_nothing(self) -> None:
        store = self.store()
        before = self.tree()
        for i, ident in enumerate(
            [
                "../outside/secret.md",
                "2025/../../outside/secret.md",
                "%2e%2e/outside/secret.md",
                "2025%2Ftps.md",
                "2025//tps.md",
                "./tps-2024.md",
                "",
                "tps-2024.md\x00",
                "%FF.md",
                "tps-2024%2Emd",
                "2025/tp%73.md",
                "tps%2D2024.md",
            ]
        ):
            with self.subTest(ident=ident):
                self.assertIs(
                    store.consume(PRINCIPAL, f"n{i}", self.clock.now + 60, (ident, "v"), ALWAYS),
                    main.Settlement.CHANGED,
                )
        self.assertEqual(self.tree(), before)

    def test_file_deleted_between_form_and_accept_is_an_error_and_consumes_the_confirmation(self) -> None:
        server = self.server()
        first = self.ask(server)
        os.unlink(self.chosen)
        result = self.answer(server, first, accept("2025/tps.md"))["result"]
        self.assertTrue(result["isError"])
        self.assertTrue(os.path.exists(self.other))
        self.assertEqual(self.answer(server, first, accept("tps-2024.md"))["error"]["code"], main.INVALID_PARAMS)
        self.assertTrue(os.path.exists(self.other))

    def test_edited_file_is_not_deleted(self) -> None:
        server = self.server()
        first = self.ask(server)
        with open(self.chosen, "a", encoding="utf-8") as handle:
            handle.write("added after the form was shown\n")
        self.assertTrue(self.answer(server, first, accept("2025/tps.md"))["result"]["isError"])
        self.assertTrue(os.path.exists(self.chosen))

    def test_decline_consumes_the_confirmation_and_deletes_nothing(self) -> None:
        server = self.server()
        first = self.ask(server)
        before = self.tree()
        declined = self.answer(server, first, {main.INPUT_KEY: {"action": "decline"}})
        self.assertEqual(declined["result"]["structuredContent"], {"deleted": False, "reason": "declined"})
        self.assertEqual(self.answer(server, first, accept("2025/tps.md"))["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.tree(), before)

    def test_failed_recheck_deletes_nothing_and_consumes_the_nonce(self) -> None:
        store = self.store()
        (note,) = [n for n in store.candidates(main.parse_file_uri(self.uri()), "2025")]
        outcome = store.consume(PRINCIPAL, "n1", self.clock.now + 60, (note.id, note.version), lambda live: False)
        self.assertIs(outcome, main.Settlement.CHANGED)
        self.assertTrue(os.path.exists(self.chosen))
        self.assertTrue(store.is_consumed("n1"))

    def crash_at(self, store: MarkdownNotesStore, when: str) -> None:
        """Consume the chosen note with the process 'dying' at hook stage `when`."""
        (note,) = store.candidates(main.parse_file_uri(self.uri()), "2025")

        def crash(stage: str) -> None:
            if stage == when:
                raise KeyboardInterrupt("simulated death")

        ledger_db(store)._inside_transaction_hook = crash
        with self.assertRaises(KeyboardInterrupt):
            store.consume(
                PRINCIPAL, "n1", self.clock.now + main.DEFAULT_STATE_TTL_SECONDS, (note.id, note.version), ALWAYS
            )
        ledger_db(store)._inside_transaction_hook = None

    def between_claim_and_move(self, action: Callable[[], None]) -> MarkdownNotesStore:
        """Consume the chosen note with `action` run after the claim commits, before the move; the store."""
        store = self.store()
        (note,) = store.candidates(main.parse_file_uri(self.uri()), "2025")
        ledger_db(store)._inside_transaction_hook = lambda stage: action() if stage == "committed" else None
        outcome = store.consume(PRINCIPAL, "n1", self.clock.now + 60, (note.id, note.version), ALWAYS)
        ledger_db(store)._inside_transaction_hook = None
        self.assertIs(outcome, main.Settlement.CHANGED)
        self.assertEqual(self.trashed(), [])
        self.assertEqual([e["outcome"] for e in store.audit_entries()], [audit.REFUSED])
        self.assertTrue(store.is_consumed("n1"))
        return store

    def test_a_file_removed_between_the_claim_and_the_move_is_refused_in_the_audit(self) -> None:
        self.between_claim_and_move(lambda: os.unlink(self.chosen))
        self.assertFalse(os.path.exists(self.chosen))

    def test_a_folder_moved_away_between_the_claim_and_the_move_is_refused_and_its_file_kept(self) -> None:
        away = os.path.join(self.ws, "moved")
        self.between_claim_and_move(lambda: os.rename(os.path.dirname(self.chosen), away))
        self.assertTrue(os.path.isfile(os.path.join(away, "tps.md")))

    def test_a_crash_inside_the_claim_transaction_records_nothing_and_moves_nothing(self) -> None:
        store = self.store()
        before = self.tree()
        self.crash_at(store, "deleted")  # the pending entry written, not yet committed
        self.assertEqual(self.tree(), before)
        self.assertEqual(self.trashed(), [])
        self.assertFalse(store.is_consumed("n1"))
        self.assertEqual(self.store().audit_entries(), [])

    def test_a_crash_between_the_claim_and_the_move_is_interrupted_after_restart_and_nothing_moved(self) -> None:
        store = self.store()
        before = self.tree()
        self.crash_at(store, "committed")
        self.assertEqual(self.tree(), before)
        (entry,) = store.nonces.audit_entries()
        self.assertEqual(entry["outcome"], audit.PENDING)
        # Restarted within the grace: another instance may still be moving it, so it stays pending.
        self.clock.now += audit.PENDING_GRACE_SECONDS - 1
        self.assertEqual([e["outcome"] for e in self.store().audit_entries()], [audit.PENDING])
        self.clock.now += 1
        (entry,) = self.store().audit_entries()
        self.assertEqual(entry["outcome"], audit.INTERRUPTED)
        self.assertEqual(self.tree(), before)
        self.assertEqual(self.trashed(), [])
        self.assertTrue(store.is_consumed("n1"))  # the confirmation stays used: a replay moves nothing
        self.assertIs(
            self.store().consume(PRINCIPAL, "n1", self.clock.now + 60, ("2025/tps.md", "v"), ALWAYS),
            main.Settlement.USED,
        )

    def test_a_pending_entry_of_a_folder_replaced_since_start_up_stays_pending_and_its_listing_works(self) -> None:
        store = self.store()
        self.crash_at(store, "committed")
        os.rename(self.ws, self.ws + "-old")
        os.symlink(self.outside, self.ws)  # the path now leads to a folder this store never opened
        self.clock.now += audit.PENDING_GRACE_SECONDS
        before = FolderIdentityTests.snapshot(self.outside)
        self.assertEqual(
            [e["outcome"] for e in store.audit_entries()], [audit.PENDING]
        )  # not judged from another folder
        self.assertEqual(FolderIdentityTests.snapshot(self.outside), before)

    def test_a_crash_between_the_move_and_its_completion_is_deleted_after_restart(self) -> None:
        store = self.store()
        before = self.tree()
        self.crash_at(store, "moved")
        self.assertEqual(self.tree(), before - {"ws/2025/tps.md"})
        (pending,) = store.nonces.audit_entries()
        self.assertEqual((pending["outcome"], [pending["trash"]]), (audit.PENDING, self.trashed()))
        (entry,) = self.store().audit_entries()  # at once: the file is in the trash
        self.assertEqual(
            (entry["id"], entry["outcome"], entry["note_id"]), (pending["id"], audit.DELETED, "2025/tps.md")
        )
        self.assertEqual(self.store().restore(entry["id"])["outcome"], audit.RESTORED)
        self.assertEqual(self.tree(), before)

    def test_a_store_opened_while_another_instance_writes_starts_and_completes_the_entry_later(self) -> None:
        self.crash_at(self.store(), "moved")
        nonces = sqlite_store.open_ledger(os.path.join(self.base, "nonces.db"), clock=self.clock, busy_timeout_ms=50)
        self.addCleanup(nonces.close)
        holder = sqlite3.connect(os.path.join(self.base, "nonces.db"), isolation_level=None)
        self.addCleanup(holder.close)
        holder.execute("BEGIN IMMEDIATE")  # another instance inside its consume transaction
        store = MarkdownNotesStore([self.ws], nonces)  # does not fail: the pending entry waits
        self.assertEqual([e["outcome"] for e in nonces.audit_entries()], [audit.PENDING])
        holder.execute("ROLLBACK")
        self.assertEqual([e["outcome"] for e in store.audit_entries()], [audit.DELETED])


class RequestNameTests(FolderCase):
    def setUp(self) -> None:
        super().setUp()
        self.write("My Notes/café/TPS ü.md", "# TPS unicode\n")

    def test_dot_dot_percent_encoded_dot_dot_and_nul_in_the_workspace_uri_are_refused(self) -> None:
        server = self.server()
        before = self.tree()
        for suffix in (
            "/../outside",
            "/%2e%2e/outside",
            "/%2E%2E/outside",
            "/sub%00",
            "/%252e%252e/outside",
            "\\..\\outside",
        ):
            with self.subTest(suffix=suffix):
                result = self.ask(server, "TPS", self.uri() + suffix)["result"]
                self.assertTrue(result["isError"])
                self.assertNotIn("requestState", result)
        self.assertEqual(self.tree(), before)
        self.assertSecretIntact()

    def test_spaces_and_unicode_in_the_workspace_uri_reach_the_real_folder(self) -> None:
        server = self.server()
        workspace = self.uri("My Notes", "café")
        self.assertIn("My%20Notes/caf%C3%A9", workspace)
        first = self.ask(server, "TPS", workspace)
        self.assertEqual(self.offered(first), ["My Notes/café/TPS ü.md"])

    def test_hostile_titles_match_nothing_and_touch_nothing(self) -> None:
        server = self.server()
        before = self.tree()
        for title in ("../outside/secret", "%2e%2e", "/", "outside"):
            with self.subTest(title=title):
                result = self.ask(server, title)["result"]
                self.assertTrue(result["isError"])
        self.assertEqual(self.ask(server, "TPS\x00")["error"]["code"], main.INVALID_PARAMS)  # refused before any store
        self.assertEqual(self.tree(), before)

    def test_a_workspace_outside_every_notes_folder_lists_nothing(self) -> None:
        store = self.store()
        self.assertEqual(
            store.candidates(main.parse_file_uri(main.format_file_uri(tuple(self.outside.split("/")[1:]))), ""), []
        )


class ConstructionTests(FolderCase):
    def test_a_missing_folder_is_a_start_up_error(self) -> None:
        with self.assertRaises(stores.StoreError):
            self.store([os.path.join(self.base, "absent")])

    def test_a_folder_a_file_uri_cannot_name_is_a_start_up_error(self) -> None:
        bad = os.path.join(self.base, "50%")
        os.makedirs(bad)
        with self.assertRaises(stores.StoreError):
            self.store([bad])

    def test_a_folder_inside_another_is_merged_so_each_file_has_one_id(self) -> None:
        self.write("sub/TPS.md")
        store = self.store([os.path.join(self.ws, "sub"), self.ws])
        self.assertEqual(store.workspace_uris(), [self.uri()])
        self.assertEqual(self.listed(store, "TPS", "sub"), {"sub/TPS.md": "TPS"})


class SeamAndShutdownTests(FolderCase):
    def test_close_checkpoints_the_nonce_database_and_is_idempotent(self) -> None:
        store = self.store()
        other = sqlite3.connect(os.path.join(self.base, "nonces.db"))  # another instance shares it
        self.addCleanup(other.close)
        other.execute("SELECT COUNT(*) FROM consumed_nonces").fetchone()
        self.assertIs(store.consume(PRINCIPAL, "n1", self.clock.now + 60, None, ALWAYS), main.Settlement.CONSUMED)
        store.close()
        store.close()
        copy = os.path.join(self.base, "copy.db")
        shutil.copyfile(os.path.join(self.base, "nonces.db"), copy)
        conn = sqlite3.connect(copy)
        self.addCleanup(conn.close)
        self.assertEqual(conn.execute("SELECT nonce FROM consumed_nonces").fetchall(), [("n1",)])


class ClockStepBackTests(FolderCase):
    def test_an_accept_replayed_after_the_clock_steps_back_deletes_nothing(self) -> None:
        chosen = self.write("tps.md", "# TPS report\n")
        store = self.store()
        (note,) = store.candidates(main.parse_file_uri(self.uri()), "TPS")
        expires = self.clock.now + 60
        self.assertIs(store.consume(PRINCIPAL, "n1", expires, None, ALWAYS), main.Settlement.CONSUMED)
        self.clock.now = expires + 1
        self.assertIs(store.consume("bob", "later", self.clock.now + 60, None, ALWAYS), main.Settlement.CONSUMED)
        self.assertFalse(store.is_consumed("n1"))  # pruned
        self.clock.now = expires - 30
        self.assertIs(store.consume(PRINCIPAL, "n1", expires, (note.id, note.version), ALWAYS), main.Settlement.USED)
        self.assertTrue(os.path.exists(chosen))
        self.assertFalse(store.is_consumed("n1"))


class OsRefusalTests(FolderCase):
    def setUp(self) -> None:
        super().setUp()
        self.chosen = self.write("2025/tps.md", "# TPS report 2025\n")
        self.write("tps-2024.md", "# TPS report 2024\n")

    def target(self, store: MarkdownNotesStore) -> tuple[str, str]:
        (note,) = store.candidates(main.parse_file_uri(self.uri()), "2025")
        return (note.id, note.version)

    def test_a_delete_the_os_refuses_rolls_back_the_confirmation_and_deletes_nothing(self) -> None:
        store = self.store(deletion=audit.DELETION_UNLINK)
        target = self.target(store)
        before = self.tree()
        # What an append-only (chattr +a) folder or a read-only mount answers to the move
        # that comes before the unlink.
        refusal = PermissionError(1, "Operation not permitted")
        with mock.patch.object(folder_trash, "rename_noreplace", side_effect=refusal):
            with self.assertRaises(stores.StoreRefused) as caught:
                store.consume(PRINCIPAL, "n1", self.clock.now + 60, target, ALWAYS)
        self.assertNotIn("\n", str(caught.exception))
        self.assertNotIn(self.base, str(caught.exception))
        self.assertIn("could not be deleted", str(caught.exception))
        self.assertEqual(self.tree(), before)
        self.assertFalse(store.is_consumed("n1"))
        # Nothing was spent: once the folder allows it, the same confirmation deletes the file.
        self.assertIs(store.consume(PRINCIPAL, "n1", self.clock.now + 60, target, ALWAYS), main.Settlement.DELETED)
        self.assertEqual(self.tree(), before - {"ws/2025/tps.md"})
        self.assertEqual(self.trashed(), [])

    def test_a_move_to_the_trash_the_os_refuses_releases_the_claim_and_its_entry(self) -> None:
        store = self.store()
        target = self.target(store)
        before = self.tree()
        refusal = OSError(18, "Invalid cross-device link")  # EXDEV: a sub-folder on another file system
        with mock.patch.object(folder_trash, "rename_noreplace", side_effect=refusal):
            with self.assertRaises(stores.StoreRefused) as caught:
                store.consume(PRINCIPAL, "n1", self.clock.now + 60, target, ALWAYS)
        self.assertEqual(str(caught.exception), folder_trash.DELETE_REFUSED)
        self.assertEqual(self.tree(), before)
        self.assertEqual(self.trashed(), [])
        self.assertFalse(store.is_consumed("n1"))
        self.assertEqual(store.audit_entries(), [])
        self.assertIs(store.consume(PRINCIPAL, "n1", self.clock.now + 60, target, ALWAYS), main.Settlement.DELETED)
        self.assertEqual([e["outcome"] for e in store.audit_entries()], [audit.DELETED])

    def real_stat_then(self, action: Callable[[], None]) -> Callable[..., os.stat_result]:
        """os.stat that runs `action` first when the re-check before the unlink stats the chosen file."""
        real = os.stat
        fired: list[bool] = []

        def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if path == "tps.md" and kwargs.get("dir_fd") is not None and not fired:
                fired.append(True)
                action()
            return real(path, *args, **kwargs)

        return stat

    def test_entry_replaced_between_the_lookup_and_the_unlink_is_not_deleted(self) -> None:
        def replace() -> None:
            self.write_at(self.chosen + ".tmp", "# substitute\n")
            os.replace(self.chosen + ".tmp", self.chosen)

        store = self.store(ops=folder_paths.OS_OPS._replace(stat=self.real_stat_then(replace)))
        target = self.target(store)
        before = self.tree()
        outcome = store.consume(PRINCIPAL, "n1", self.clock.now + 60, target, ALWAYS)
        self.assertIs(outcome, main.Settlement.CHANGED)
        self.assertEqual(self.tree(), before)
        with open(self.chosen, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "# substitute\n")
        self.assertTrue(store.is_consumed("n1"))

    def test_entry_removed_between_the_lookup_and_the_unlink_is_reported_changed(self) -> None:
        store = self.store(ops=folder_paths.OS_OPS._replace(stat=self.real_stat_then(lambda: os.unlink(self.chosen))))
        target = self.target(store)
        before = self.tree() - {"ws/2025/tps.md"}
        outcome = store.consume(PRINCIPAL, "n1", self.clock.now + 60, target, ALWAYS)
        self.assertIs(outcome, main.Settlement.CHANGED)
        self.assertEqual(self.tree(), before)
        self.assertTrue(store.is_consumed("n1"))

    def test_in_unlink_mode_an_entry_removed_between_the_re_stat_and_the_move_is_reported_changed(self) -> None:
        store = self.store(deletion=audit.DELETION_UNLINK)
        target = self.target(store)
        real = folder_trash.rename_noreplace

        def gone_first(*args: Any) -> None:
            os.unlink(self.chosen)  # another actor wins the race by a hair
            real(*args)

        with mock.patch.object(folder_trash, "rename_noreplace", gone_first):
            outcome = store.consume(PRINCIPAL, "n1", self.clock.now + 60, target, ALWAYS)
        self.assertIs(outcome, main.Settlement.CHANGED)
        self.assertTrue(store.is_consumed("n1"))
        self.assertEqual([e["outcome"] for e in store.audit_entries()], [audit.REFUSED])

    def test_an_unlink_the_trash_refuses_puts_the_file_back_and_releases_the_claim(self) -> None:
        refused = mock.Mock(side_effect=PermissionError(1, "Operation not permitted"))
        store = self.store(deletion=audit.DELETION_UNLINK, ops=folder_paths.OS_OPS._replace(unlink=refused))
        target = self.target(store)
        before = self.tree()
        with self.assertRaises(stores.StoreRefused) as caught:
            store.consume(PRINCIPAL, "n1", self.clock.now + 60, target, ALWAYS)
        refused.assert_called_once()
        self.assertEqual(str(caught.exception), folder_trash.DELETE_REFUSED)
        self.assertEqual(self.tree(), before)
        self.assertEqual(self.trashed(), [])
        with open(self.chosen, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "# TPS report 2025\n")
        self.assertFalse(store.is_consumed("n1"))
        self.assertEqual(store.audit_entries(), [])

    def test_entry_removed_between_the_re_stat_and_the_move_is_refused_in_the_audit(self) -> None:
        store = self.store()
        target = self.target(store)
        real = folder_trash.rename_noreplace

        def gone_first(*args: Any) -> None:
            os.unlink(self.chosen)  # another actor wins the race by a hair
            real(*args)

        with mock.patch.object(folder_trash, "rename_noreplace", gone_first):
            outcome = store.consume(PRINCIPAL, "n1", self.clock.now + 60, target, ALWAYS)
        self.assertIs(outcome, main.Settlement.CHANGED)
        self.assertTrue(store.is_consumed("n1"))
        self.assertEqual(self.trashed(), [])
        self.assertEqual([e["outcome"] for e in store.audit_entries()], [audit.REFUSED])


class WorkspaceProblemTests(FolderCase):
    """A workspace inside a granted notes folder that is no folder says why, in one line, apart from "no note
    matches"."""

    def refusal(self, workspace: str) -> str:
        """The text of the isError result a first call in `workspace` gets (no form, no state)."""
        result = self.ask(self.server(), "TPS", workspace)["result"]
        self.assertTrue(result["isError"])
        self.assertNotIn("requestState", result)
        (content,) = result["content"]
        self.assertNotIn("\n", content["text"])
        return content["text"]

    def test_a_missing_workspace_says_it_does_not_exist_not_that_no_note_matches(self) -> None:
        self.write("tps.md", "# TPS report\n")
        self.assertEqual(
            self.refusal(self.uri("absent")), folder_paths.WORKSPACE_MISSING.format(where=self.uri("absent"))
        )

    def test_a_workspace_that_is_a_file_says_it_is_a_file(self) -> None:
        self.write("plan.md", "# TPS plan\n")
        self.assertEqual(
            self.refusal(self.uri("plan.md")), folder_paths.WORKSPACE_FILE.format(where=self.uri("plan.md"))
        )

    def test_a_workspace_that_is_a_symbolic_link_says_it_is_not_followed_and_names_nothing_behind_it(self) -> None:
        os.symlink(self.outside, os.path.join(self.ws, "linked"))
        text = self.refusal(self.uri("linked"))
        self.assertEqual(text, folder_paths.WORKSPACE_LINK.format(where=self.uri("linked")))
        self.assertNotIn("outside", text)
        self.assertNotIn("secret", text)

    def test_a_workspace_below_a_link_or_a_file_says_only_that_its_path_cannot_be_reached(self) -> None:
        os.symlink(self.outside, os.path.join(self.ws, "linked"))
        self.write("plan.md", "# TPS plan\n")
        for below in (("linked", "sub"), ("plan.md", "sub"), ("absent", "sub")):
            with self.subTest(below=below):
                # A component above the workspace may lie above the caller's grant: which one
                # failed, and how, is not said.
                self.assertEqual(
                    self.refusal(self.uri(*below)), folder_paths.WORKSPACE_PATH.format(where=self.uri(*below))
                )

    def test_a_hidden_workspace_says_it_is_not_served(self) -> None:
        self.write(".obsidian/tps.md", "# TPS hidden\n")
        self.assertEqual(
            self.refusal(self.uri(".obsidian")), folder_paths.WORKSPACE_HIDDEN.format(where=self.uri(".obsidian"))
        )

    def test_an_existing_workspace_without_a_match_still_says_no_note_matches(self) -> None:
        os.makedirs(os.path.join(self.ws, "empty"))
        self.assertTrue(self.refusal(self.uri("empty")).startswith("No note titled like 'TPS'"))

    def test_a_workspace_outside_the_grants_still_gets_the_authorization_error(self) -> None:
        granted = self.refusal(self.uri("absent"))
        for outside in (self.outside, os.path.join(self.base, "absent"), self.secret):
            with self.subTest(outside=outside):
                text = self.refusal(main.format_file_uri(tuple(p for p in outside.split("/") if p)))
                self.assertTrue(text.startswith("That workspace is not authorized for you."), text)
                self.assertNotIn("exist", text)
        self.assertNotEqual(granted, text)


class FolderIdentityTests(FolderCase):
    """Two principals' folders: a folder whose path leads elsewhere since start-up offers, deletes and restores
    nothing."""

    def setUp(self) -> None:
        super().setUp()
        self.alice = os.path.join(self.base, "alice")
        self.bob = os.path.join(self.base, "bob")
        self.write_at(os.path.join(self.alice, "tps.md"), "# TPS alice\n")
        self.write_at(os.path.join(self.bob, "tps.md"), "# TPS bob\n")
        self.write_at(os.path.join(self.bob, "2025", "plan.md"), "# TPS bob plan\n")
        self.bob_before = self.snapshot(self.bob)

    @staticmethod
    def snapshot(folder: str) -> dict[str, str]:
        """Every file below `folder` (the trash included) with its content."""
        found = {}
        for where, _, names in os.walk(folder):
            for name in names:
                with open(os.path.join(where, name), encoding="utf-8") as handle:
                    found[os.path.relpath(os.path.join(where, name), folder)] = handle.read()
        return found

    def both(self) -> MarkdownNotesStore:
        return self.store([self.alice, self.bob])

    def alice_path(self) -> main.Path:
        return tuple(p for p in self.alice.split("/") if p)

    def link_bob_at_alice(self) -> None:
        os.rename(self.alice, self.alice + "-old")
        os.symlink(self.bob, self.alice)

    def rename_bob_to_alice(self) -> None:
        os.rename(self.alice, self.alice + "-old")
        os.rename(self.bob, self.alice)

    def assert_replaced(self, caught: Any, where: str) -> None:
        self.assertEqual(str(caught.exception), folder_paths.REPLACED.format(where=where))
        self.assertNotIn("bob", str(caught.exception))

    def test_a_folder_swapped_for_a_link_or_renamed_over_offers_nothing_and_says_so(self) -> None:
        for swap in (self.link_bob_at_alice, self.rename_bob_to_alice):
            with self.subTest(swap=swap.__name__):
                self.setUp()
                store = self.both()
                self.assertEqual([n.title for n in store.candidates(self.alice_path(), "TPS")], ["TPS alice"])
                swap()
                with self.assertRaises(stores.StoreRefused) as caught:
                    store.candidates(self.alice_path(), "TPS")
                self.assert_replaced(caught, main.format_file_uri(self.alice_path()))
                with self.assertRaises(stores.StoreRefused):
                    store.candidates(self.alice_path() + ("2025",), "TPS")

    def test_a_confirmation_from_before_the_swap_deletes_nothing_and_records_nothing(self) -> None:
        for swap in (self.link_bob_at_alice, self.rename_bob_to_alice):
            with self.subTest(swap=swap.__name__):
                self.setUp()
                store = self.both()
                (note,) = store.candidates(self.alice_path(), "TPS")
                swap()
                with self.assertRaises(stores.StoreRefused) as caught:
                    store.consume(PRINCIPAL, "n1", self.clock.now + 60, (note.id, note.version), ALWAYS)
                self.assert_replaced(caught, main.format_file_uri(self.alice_path()))
                self.assertEqual(self.snapshot(self.alice + "-old"), {"tps.md": "# TPS alice\n"})
                moved = self.alice if swap == self.rename_bob_to_alice else self.bob
                self.assertEqual(self.snapshot(moved), self.bob_before)
                self.assertFalse(store.is_consumed("n1"))
                self.assertEqual(store.audit_entries(), [])

    def test_a_swap_between_the_claim_and_the_move_moves_nothing_and_releases_the_claim(self) -> None:
        store = self.both()
        (note,) = store.candidates(self.alice_path(), "TPS")
        ledger_db(store)._inside_transaction_hook = lambda stage: (
            self.link_bob_at_alice() if stage == "committed" else None
        )
        with self.assertRaises(stores.StoreRefused) as caught:
            store.consume(PRINCIPAL, "n1", self.clock.now + 60, (note.id, note.version), ALWAYS)
        ledger_db(store)._inside_transaction_hook = None
        self.assert_replaced(caught, main.format_file_uri(self.alice_path()))
        self.assertEqual(self.snapshot(self.alice + "-old"), {"tps.md": "# TPS alice\n"})
        self.assertEqual(self.snapshot(self.bob), self.bob_before)
        self.assertFalse(store.is_consumed("n1"))
        self.assertEqual(store.audit_entries(), [])

    def test_a_restore_into_a_swapped_folder_is_refused_and_its_trash_is_not_emptied(self) -> None:
        store = self.both()
        (note,) = store.candidates(self.alice_path(), "TPS")
        self.assertIs(
            store.consume(PRINCIPAL, "n1", self.clock.now + 60, (note.id, note.version), ALWAYS),
            main.Settlement.DELETED,
        )
        (entry,) = store.audit_entries()
        self.write_at(
            os.path.join(self.bob, folder_trash.TRASH_DIR, "19700101T000000Z-0123456789ab-old.md"),
            "# bob's trashed note\n",
        )
        self.bob_before = self.snapshot(self.bob)
        self.link_bob_at_alice()
        with self.assertRaises(stores.StoreRefused) as caught:
            store.restore(entry["id"])
        self.assert_replaced(caught, main.format_file_uri(self.alice_path()))
        self.clock.now += store.retention.trash_seconds + 1
        store.empty_trash()  # bob's own folder, emptied through bob's root, once
        self.assertEqual(
            self.snapshot(self.bob), {k: v for k, v in self.bob_before.items() if not k.startswith(".trash/")}
        )
        old = self.snapshot(self.alice + "-old")
        self.assertEqual(list(old.values()), ["# TPS alice\n"])  # alice's trashed note stays where it was
        self.assertEqual([e["outcome"] for e in store.audit_entries()], [audit.DELETED])

    def test_two_configured_paths_that_are_one_folder_are_refused_at_start_up(self) -> None:
        self.link_bob_at_alice()
        nonces = sqlite_store.open_ledger(new_database(os.path.join(self.base, "nonces.db")), clock=self.clock)
        self.addCleanup(nonces.close)
        with self.assertRaises(stores.StoreError) as caught:
            MarkdownNotesStore([self.alice, self.bob], nonces)
        self.assertIn("are one folder", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))
        self.assertEqual(self.snapshot(self.bob), self.bob_before)


class ExchangeRaceTests(FolderCase):
    """A file exchanged with the confirmed one between the last check and the move is put back; nothing is deleted."""

    def setUp(self) -> None:
        super().setUp()
        why = races.unavailable()
        if why is not None:
            self.skipTest(why)
        self.chosen = self.write("2025/tps.md", "# TPS report 2025\n")
        self.decoy = self.write("2025/other.txt", "# another file\n")

    def exchange_at_the_move(self) -> Any:
        """rename_noreplace that exchanges the chosen file with the decoy just before its first call (the move)."""
        real = folder_trash.rename_noreplace
        calls: list[str] = []

        def exchanged_first(*args: Any) -> None:
            if not calls:
                races.exchange(self.chosen, self.decoy)  # after the re-stat, before the move
            calls.append(args[1])
            real(*args)

        return mock.patch.object(folder_trash, "rename_noreplace", exchanged_first)

    def test_the_exchanged_file_is_put_back_the_answer_is_an_error_and_the_audit_says_refused(self) -> None:
        for deletion in (audit.DELETION_TRASH, audit.DELETION_UNLINK):
            with self.subTest(deletion=deletion):
                self.setUp()
                store = self.store(deletion=deletion)
                server = self.server(store)
                first = self.ask(server, "2025")
                with self.exchange_at_the_move():
                    done = self.answer(server, first, accept("2025/tps.md"), title="2025")["result"]
                self.assertTrue(done["isError"])
                self.assertIn("changed", done["content"][0]["text"])
                # The attacker's exchange stands; the server undid only its own move.
                for path, text in ((self.chosen, "# another file\n"), (self.decoy, "# TPS report 2025\n")):
                    with open(path, encoding="utf-8") as handle:
                        self.assertEqual(handle.read(), text)
                self.assertEqual(self.trashed(), [])
                (entry,) = store.audit_entries()
                self.assertEqual((entry["outcome"], entry["note_id"]), (audit.REFUSED, "2025/tps.md"))
                replay = self.answer(server, first, accept("2025/tps.md"), title="2025")
                self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)  # the confirmation is spent

    def test_of_200_raced_deletions_none_trashes_another_file(self) -> None:
        outcomes = races.race(STRESS_TRIES)
        self.assertEqual(sum(outcomes.values()), STRESS_TRIES)
        self.assertEqual(outcomes[races.WRONG], 0, dict(outcomes))


class NameAndSizeTests(FolderCase):
    def test_a_40_character_japanese_name_fits_the_id_bound_and_deletes_end_to_end(self) -> None:
        name = ("議事録" * 14)[:40] + ".md"
        path = self.write("会議/" + name, "# 議事録 TPS\n")
        server = self.server()
        first = self.ask(server, "議事録")
        self.assertEqual(self.offered(first), ["会議/" + name])
        done = self.answer(server, first, accept("会議/" + name), title="議事録")
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "会議/" + name})
        self.assertFalse(os.path.exists(path))

    def test_titles_that_render_alike_nfc_and_nfd_are_both_offered_with_ids_that_differ_when_rendered(self) -> None:
        nfc, nfd = unicodedata.normalize("NFC", "Café plan"), unicodedata.normalize("NFD", "Café plan")
        self.assertNotEqual(nfc, nfd)
        self.write(nfc + ".md", f"# {nfc}\n")
        self.write(nfd + ".md", f"# {nfd}\n")
        listed = self.listed(self.store(), "plan")
        self.assertEqual(sorted(listed.values()), sorted([nfc, nfd]))
        self.assertEqual(len({unicodedata.normalize("NFC", ident) for ident in listed}), 2)
        self.assertIn(nfc + ".md", listed)  # the NFC name is its own id; the NFD one is percent-encoded
        self.assertIn(main.format_file_uri((nfd + ".md",))[len("file:///") :], listed)
        # In the form, each is shown with its id, as exact duplicates are.
        options = main.choice_options(self.store().candidates(main.parse_file_uri(self.uri()), "plan"))
        self.assertEqual(
            [option["title"] for option in options],
            [f"{listed[option['const']]} ({option['const']})" for option in options],
        )

    def test_a_note_with_a_percent_encoded_id_is_deleted_by_that_id(self) -> None:
        nfd = unicodedata.normalize("NFD", "Café plan") + ".md"
        path = self.write(nfd, "# plan\n")
        store = self.store()
        (note,) = store.candidates(main.parse_file_uri(self.uri()), "plan")
        self.assertIn("%", note.id)
        self.assertIs(
            store.consume(PRINCIPAL, "n1", self.clock.now + 60, (note.id, note.version), ALWAYS),
            main.Settlement.DELETED,
        )
        self.assertFalse(os.path.exists(path))

    def test_id_path_accepts_one_spelling_per_file_and_nothing_else(self) -> None:
        nfd = unicodedata.normalize("NFD", "é")
        self.assertEqual(folder_paths.id_path("会議/議事録.md"), ("会議", "議事録.md"))
        self.assertEqual(folder_paths.id_path("Cafe%CC%81.md"), (unicodedata.normalize("NFD", "Café.md"),))
        for ident in (
            "tps%2D2024.md",
            "%E4%BC%9A%E8%AD%B0/x.md",
            nfd + ".md",
            "a/../b.md",
            "a%2Fb.md",
            "%FF.md",
            ".hidden.md",
        ):
            with self.subTest(ident=ident):
                self.assertIsNone(folder_paths.id_path(ident))

    def test_plain_names_are_exactly_those_one_file_uri_component_spells_unchanged(self) -> None:
        # plain() takes a shortcut for unreserved ASCII names; it must agree with the
        # URI round trip it stands for on every name, shortcut or not.
        def spelled_unchanged(name: str) -> bool:
            if not name or name.startswith(".") or "/" in name:
                return False
            try:
                return main.parse_file_uri(main.format_file_uri((name,))) == (name,)
            except (main.ScopeError, UnicodeEncodeError):
                return False

        alphabet = "aZ09-_.~ %\\/?#:@\x00\x1f\x7fé会\u202e\udcff"
        rng = random.Random(7)
        names = [
            "a" * folder_paths.NAME_MAX,
            "a" * (folder_paths.NAME_MAX + 1),
            "a" * main.MAX_URI_LENGTH,
            ".md",
            "..",
            "~x.md",
            " x.md",
            "x .md",
            "-.md",
        ]
        names += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(3000)]
        for name in names:
            with self.subTest(name=name):
                self.assertEqual(folder_paths.plain(name), spelled_unchanged(name))

    def test_a_note_whose_name_shows_nothing_before_its_suffix_is_titled_by_the_whole_name(self) -> None:
        self.write(" .md", "no heading\n")
        self.assertEqual(self.listed(self.store()), {" .md": ".md"})

    def test_invisible_characters_in_a_name_stay_percent_encoded_in_the_id(self) -> None:
        self.write("a\u202egpj.md", "# TPS bidi\n")
        self.assertEqual(list(self.listed(self.store(), "bidi")), ["a%E2%80%AEgpj.md"])

    def test_a_byte_order_mark_before_the_heading_is_ignored(self) -> None:
        with open(os.path.join(self.ws, "bom.md"), "wb") as handle:
            handle.write(b"\xef\xbb\xbf# Budget 2025\nbody\n")
        self.assertEqual(self.listed(self.store()), {"bom.md": "Budget 2025"})

    def test_the_default_entry_bound_is_the_named_constant(self) -> None:
        self.assertEqual(self.store().max_walk_entries, folder_paths.MAX_WALK_ENTRIES)
        self.assertGreaterEqual(folder_paths.MAX_WALK_ENTRIES, 100_000)

    def test_walk_entry_limit_on_both_sides_and_over_it_the_listing_says_the_folder_is_too_large(self) -> None:
        limit = 12
        for i in range(limit - 2):
            self.write(f"m{i:02}.md", "# TPS\n")
        self.write("sub/a.md", "# TPS\n")  # the folder entry and the file both count
        store = MarkdownNotesStore([self.ws], self.store().nonces, max_walk_entries=limit)
        self.assertEqual(len(self.listed(store, "TPS")), limit - 1)
        self.write("one-more.md", "# unrelated\n")
        with self.assertRaises(stores.StoreRefused) as caught:
            store.candidates(main.parse_file_uri(self.uri()), "TPS")
        self.assertIn(f"more than {limit:,} entries", str(caught.exception))
        self.assertNotIn(self.base, str(caught.exception))


BOB_TOKEN = "bob-token-0123456789abcdef"


class TwoPrincipalServerTests(unittest.TestCase):
    """A real server over HTTP, alice and bob each with a notes folder; alice swaps hers for bob's after start-up."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="md-two-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.alice = os.path.join(self.dir, "alice")
        self.bob = os.path.join(self.dir, "bob")
        for folder, rel, text in (
            (self.alice, "tps.md", "# TPS alice\n"),
            (self.alice, "old.md", "# TPS alice old\n"),
            (self.bob, "tps.md", "# TPS bob secret\n"),
            (self.bob, "2025/plan.md", "# TPS bob plan\n"),
        ):
            FolderCase.write_at(os.path.join(folder, rel), text)
        self.db = os.path.join(self.dir, "nonces.db")
        self.config = procs.write_config(
            self,
            {
                "principals": {
                    "alice": {"token": procs.TOKEN, "workspaces": [], "notesDirs": [self.alice]},
                    "bob": {"token": BOB_TOKEN, "workspaces": [], "notesDirs": [self.bob]},
                },
                "stdioPrincipal": "alice",
                "db": self.db,
            },
        )
        self.env = procs.server_env(NOTES_MCP_SECRET=procs.SECRET, XDG_STATE_HOME=os.path.join(self.dir, "state"))
        self.server = procs.HttpServer(self, "--config", self.config, env=self.env)
        self.bob_before = FolderIdentityTests.snapshot(self.bob)
        self.alice_uri = main.format_file_uri(tuple(p for p in self.alice.split("/") if p))
        self.bob_uri = main.format_file_uri(tuple(p for p in self.bob.split("/") if p))

    def call(self, arguments: dict[str, Any], token: str = procs.TOKEN, **extra: Any) -> dict[str, Any]:
        message = call(arguments, **extra)
        _, _, body = procs.post(self.server.connect(self), message, procs.mcp_headers(message, token))
        return json.loads(body)["result"]

    def audit_command(self, *args: str) -> subprocess.CompletedProcess[str]:
        return test_folder_swap.audit_command(self.config, self.env, *args)

    def audit_rows(self) -> list[tuple[Any, ...]]:
        return test_folder_swap.audit_rows(self.db, "principal, outcome, note_id, title, uri, workspace")

    def attack(self, swap: Callable[[], None], bob_now: str) -> None:
        """alice: a form and a deletion of her own before the swap; then the swap, a first call, an accept, a
        restore."""
        alice_args = {"workspaceUri": self.alice_uri, "title": "TPS"}
        form = self.call(alice_args)
        self.assertEqual(FolderCase.offered({"result": form}), ["tps.md", "old.md"])
        mine = self.call(alice_args, id=2, requestState=form["requestState"], inputResponses=accept("old.md"))
        self.assertTrue(mine["structuredContent"]["deleted"], mine)
        before_swap = self.call(alice_args, id=3)
        swap()
        replaced = folder_paths.REPLACED.format(where=self.alice_uri)
        first = self.call(alice_args, id=4)
        self.assertTrue(first["isError"])
        self.assertEqual(first["content"][0]["text"], replaced)
        self.assertNotIn("requestState", first)
        accepted = self.call(
            alice_args, id=5, requestState=before_swap["requestState"], inputResponses=accept("tps.md")
        )
        self.assertTrue(accepted["isError"])
        self.assertEqual(accepted["content"][0]["text"], replaced)
        # The operator's restore of alice's entry: the command opens the store and its folders afresh.
        restore = self.audit_command("restore", "1")
        self.assertNotEqual(restore.returncode, 0)
        self.assertNotIn("Traceback", restore.stderr)
        self.results = [
            first["content"][0]["text"],
            accepted["content"][0]["text"],
            (restore.stdout + restore.stderr).strip(),
        ]
        # Bob's notes: never offered, never moved, never deleted; the audit names nothing of bob's.
        self.assertEqual(FolderIdentityTests.snapshot(bob_now), self.bob_before)
        for text in self.results[:2]:  # what alice reads (the restore's line is the operator's)
            self.assertNotIn(self.bob, text)
            self.assertNotIn("TPS bob", text)
        rows = self.audit_rows()
        self.assertEqual([(r[0], r[1], r[2]) for r in rows], [("alice", audit.DELETED, "old.md")])
        self.assertFalse(any("bob" in str(value) for row in rows for value in row))

    def test_a_link_to_bob_s_folder_at_alice_s_path_offers_moves_and_restores_nothing_of_bob_s(self) -> None:
        def swap() -> None:
            os.rename(self.alice, self.alice + "-old")
            os.symlink(self.bob, self.alice)

        self.attack(swap, self.bob)
        self.assertIn("are one folder", self.results[2])
        # bob's own folder is still served to bob.
        bob = self.call({"workspaceUri": self.bob_uri, "title": "TPS"}, token=BOB_TOKEN)
        self.assertEqual(sorted(FolderCase.offered({"result": bob})), ["2025/plan.md", "tps.md"])

    def test_bob_s_folder_renamed_into_alice_s_path_offers_moves_and_restores_nothing_of_bob_s(self) -> None:
        def swap() -> None:
            os.rename(self.alice, self.alice + "-old")
            os.rename(self.bob, self.alice)

        self.attack(swap, self.alice)
        self.assertIn("does not exist", self.results[2])
        bob = self.call({"workspaceUri": self.bob_uri, "title": "TPS"}, token=BOB_TOKEN)
        self.assertEqual(bob["content"][0]["text"], folder_paths.REPLACED.format(where=self.bob_uri))


if __name__ == "__main__":
    unittest.main()
