"""The opt-in note tools: each behaviour written once and run on SQLite, PostgreSQL and Markdown folders.

NotesToolsContract holds the behaviours; one subclass per store says how to open it and
where its workspaces live. A refusal is checked for what it did not change as well.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest
from typing import Any
from unittest import mock

from helpers import store_workers
from helpers.sql_stores import SCRATCH, new_database
from helpers.support import FORM, KEY, PRINCIPAL, Clock, ContractCase, Log, answered, request

import audit
import folder_bodies
import folder_paths
import frame
import main
import markdown_store
import note_bodies
import notes_tools
import postgres_store
import sqlite_store
import stores
import text_index

OTHER = "bob"


def tools_call(name: str, arguments: dict[str, Any], capabilities: Any = FORM, **extra: Any) -> dict[str, Any]:
    """A tools/call of a note tool."""
    return request("tools/call", {"name": name, "arguments": arguments, **extra}, capabilities=capabilities)


def accept(key: str, confirm: bool = True) -> dict[str, Any]:
    return {key: {"action": "accept", "content": {notes_tools.CONFIRM_FIELD: confirm}}}


class NotesToolsContract(ContractCase):
    """Mixed into a TestCase per store: `open_store(clock)` and `uri(name)` (a workspace folder's URI) differ."""

    def open_store(self, clock: Clock) -> Any:
        raise NotImplementedError

    def uri(self, name: str) -> str:
        return f"file:///Users/alice/Documents/{name}"

    def setUp(self) -> None:
        self.clock = Clock()
        self.store = self.open_store(self.clock)
        self.notes_uri, self.bob_uri, self.evil_uri = self.uri("Notes"), self.uri("Bob"), self.uri("Notes-evil")
        policy = main.AuthorizationPolicy({PRINCIPAL: [self.notes_uri], OTHER: [self.bob_uri, self.evil_uri]})
        self.log = Log()
        self.server = frame.notes_server(keys=[KEY], notes=self.store, policy=policy, clock=self.clock, log=self.log)
        audit.install(self.server)
        notes_tools.install(self.server)
        self.groceries = self.create("Groceries", "milk\neggs\n")
        self.bobs = self.create("Bob secret", "bob's text\n", OTHER, self.bob_uri)
        self.evil = self.create("Groceries evil", "milk\n", OTHER, self.evil_uri)

    # ---------------------------------------------------------------- helpers

    def call(self, name: str, arguments: dict[str, Any], principal: str = PRINCIPAL, **kwargs: Any) -> dict[str, Any]:
        response = self.server.handle(tools_call(name, arguments, **kwargs), principal)
        assert response is not None
        return response

    def result(self, name: str, arguments: dict[str, Any], principal: str = PRINCIPAL, **kwargs: Any) -> dict[str, Any]:
        response = self.call(name, arguments, principal, **kwargs)
        self.assertNotIn("error", response, response)
        return response["result"]

    def create(self, title: str, body: str, principal: str = PRINCIPAL, workspace: str | None = None) -> dict[str, Any]:
        done = self.result(
            "notes_create", {"workspaceUri": workspace or self.notes_uri, "title": title, "body": body}, principal
        )
        self.assertFalse(done["isError"], done)
        return done["structuredContent"]

    def read(self, note_id: str, principal: str = PRINCIPAL, workspace: str | None = None) -> dict[str, Any]:
        done = self.result("notes_read", {"workspaceUri": workspace or self.notes_uri, "noteId": note_id}, principal)
        self.assertFalse(done["isError"], done)
        return done["structuredContent"]

    def snapshot(self) -> list[tuple[str, str | None]]:
        """Every note the tests made, as (id, text), read behind the tools' back."""
        seen: list[tuple[str, str | None]] = []
        for note, workspace in (
            (self.groceries, self.notes_uri),
            (self.bobs, self.bob_uri),
            (self.evil, self.evil_uri),
        ):
            found = self.store.note_text(note["noteId"], main.parse_file_uri(workspace))
            seen.append((note["noteId"], found[1] if found else None))
        return seen

    def outcomes(self) -> list[str]:
        return [entry["outcome"] for entry in self.store.audit_entries()]

    def update_form(self, body: str, version: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        args = {
            "workspaceUri": self.notes_uri,
            "noteId": self.groceries["noteId"],
            "body": body,
            "version": version or self.groceries["version"],
        }
        first = self.result("notes_update", args)
        self.assertEqual(first["resultType"], "input_required", first)
        return args, first

    # ---------------------------------------------------------------- reading

    def test_search_finds_titles_and_text_in_the_workspace_only_with_short_snippets(self) -> None:
        self.create("Recipes", "whisk the eggs " + "x" * 500)
        found = self.result("notes_search", {"workspaceUri": self.notes_uri, "query": "EGGS"})["structuredContent"]
        self.assertEqual(sorted(r["title"] for r in found["results"]), ["Groceries", "Recipes"])
        self.assertTrue(all(len(r["snippet"]) <= text_index.SNIPPET_CHARS for r in found["results"]))
        self.assertIn("eggs", found["results"][1]["snippet"])
        self.assertFalse(found["more"])
        by_title = self.result("notes_search", {"workspaceUri": self.notes_uri, "query": "groc"})["structuredContent"]
        self.assertEqual(
            [r["noteId"] for r in by_title["results"]], [self.groceries["noteId"]]
        )  # never the Notes-evil look-alike

    def test_a_search_returns_at_most_its_limit_and_says_there_are_more(self) -> None:
        self.create("Groceries two", "milk")
        found = self.result("notes_search", {"workspaceUri": self.notes_uri, "query": "milk", "limit": 1})[
            "structuredContent"
        ]
        self.assertEqual(len(found["results"]), 1)
        self.assertTrue(found["more"])
        at_bound = self.result(
            "notes_search", {"workspaceUri": self.notes_uri, "query": "milk", "limit": notes_tools.MAX_SEARCH_LIMIT}
        )
        self.assertFalse(at_bound["isError"])
        over = self.result(
            "notes_search", {"workspaceUri": self.notes_uri, "query": "milk", "limit": notes_tools.MAX_SEARCH_LIMIT + 1}
        )
        self.assertTrue(over["isError"])

    def test_read_returns_the_text_and_its_version_and_says_when_it_is_cut(self) -> None:
        self.assertEqual(self.read(self.groceries["noteId"])["version"], self.groceries["version"])
        self.assertIn("milk\neggs\n", self.read(self.groceries["noteId"])["text"])
        whole = self.create("At the bound", "y" * notes_tools.MAX_READ_CHARS)
        long = self.create("Over the bound", "z" * (notes_tools.MAX_READ_CHARS + 100))
        over = self.read(long["noteId"])
        self.assertTrue(over["truncated"])
        self.assertEqual(len(over["text"]), notes_tools.MAX_READ_CHARS)
        self.assertGreater(over["length"], notes_tools.MAX_READ_CHARS)
        exact = self.read(whole["noteId"])
        self.assertEqual(exact["truncated"], exact["length"] > notes_tools.MAX_READ_CHARS)

    # ---------------------------------------------------------------- scope

    def test_another_principals_workspace_a_look_alike_and_encoded_traversal_change_nothing(self) -> None:
        before, entries = self.snapshot(), self.outcomes()
        bad = [self.bob_uri, self.evil_uri, self.notes_uri + "/%2e%2e/Bob", self.notes_uri + "/%2E%2E/Notes-evil"]
        for workspace in bad:
            for name, arguments in (
                ("notes_search", {"query": "secret"}),
                ("notes_read", {"noteId": self.bobs["noteId"]}),
                ("notes_create", {"title": "Planted", "body": "x"}),
                ("notes_append", {"noteId": self.bobs["noteId"], "text": "x", "version": self.bobs["version"]}),
                ("notes_update", {"noteId": self.bobs["noteId"], "body": "x", "version": self.bobs["version"]}),
                ("notes_move", {"noteId": self.bobs["noteId"], "newPath": "moved.md"}),
            ):
                with self.subTest(workspace=workspace, tool=name):
                    done = self.result(name, {"workspaceUri": workspace, **arguments})
                    self.assertTrue(done["isError"])
                    self.assertNotIn("secret", done["content"][0]["text"])
        # Alice's own workspace cannot reach a note of another folder by its id either.
        self.assertTrue(
            self.result("notes_read", {"workspaceUri": self.notes_uri, "noteId": self.bobs["noteId"]})["isError"]
        )
        self.assertEqual(self.snapshot(), before)
        # Every refusal leaves one `refused` entry and nothing else: 6 tools x 4 workspaces
        # refused at layer 1 (the update and move refused at their form check, before it, are
        # not: they never reach the store), and the read of another folder's id at layer 2.
        refused = self.outcomes()[len(entries) :]
        self.assertEqual(set(refused), {audit.REFUSED})
        self.assertEqual(len(refused), len(bad) * 6 + 1)

    # ---------------------------------------------------------------- append

    def test_append_adds_at_the_end_and_a_stale_version_is_refused(self) -> None:
        args = {
            "workspaceUri": self.notes_uri,
            "noteId": self.groceries["noteId"],
            "text": "bread\n",
            "version": self.groceries["version"],
        }
        done = self.result("notes_append", args)
        self.assertFalse(done["isError"], done)
        self.assertTrue(self.read(self.groceries["noteId"])["text"].endswith("milk\neggs\nbread\n"))
        before = self.snapshot()
        again = self.result("notes_append", args)  # the version it read is stale now
        self.assertTrue(again["isError"])
        self.assertIn("changed since you read it", again["content"][0]["text"])
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(done["structuredContent"]["version"], self.read(self.groceries["noteId"])["version"])

    # ---------------------------------------------------------------- update

    def test_an_accepted_update_writes_exactly_the_confirmed_bytes_and_keeps_the_old_in_the_trash(self) -> None:
        body = "milk\n\tbutter\u200b\n"
        args, first = self.update_form(body)
        form = first["inputRequests"][notes_tools.UPDATE_KEY]["params"]
        self.assertIn("+\\u0009butter\\u200b", form["message"])
        self.assertIn("-eggs", form["message"])
        self.assertEqual(
            self.read(self.groceries["noteId"])["version"], self.groceries["version"]
        )  # asking changed nothing
        done = self.result(
            "notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY)
        )
        self.assertFalse(done["isError"], done)
        self.assertTrue(self.read(self.groceries["noteId"])["text"].endswith(body))
        self.assertEqual(self.outcomes()[-1], audit.UPDATED)

    def test_an_update_state_cannot_be_replayed(self) -> None:
        args, first = self.update_form("one\n")
        retry = {"requestState": first["requestState"], "inputResponses": accept(notes_tools.UPDATE_KEY)}
        self.assertFalse(self.result("notes_update", args, **retry)["isError"])
        written = self.snapshot()
        replay = self.call("notes_update", args, **retry)
        self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.snapshot(), written)

    def test_an_update_state_cannot_confirm_other_bytes(self) -> None:
        args, first = self.update_form("shown text\n")
        before = self.snapshot()
        other = dict(args, body="other text\n")
        response = self.call(
            "notes_update", other, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY)
        )
        self.assertEqual(response["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.snapshot(), before)
        # The state was not consumed by the refusal: the shown bytes can still be confirmed.
        done = self.result(
            "notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY)
        )
        self.assertTrue(self.read(self.groceries["noteId"])["text"].endswith("shown text\n"), done)

    def test_a_declined_or_unticked_update_changes_nothing_and_ends_the_confirmation(self) -> None:
        before = self.snapshot()
        for answer in ({notes_tools.UPDATE_KEY: {"action": "decline"}}, accept(notes_tools.UPDATE_KEY, confirm=False)):
            args, first = self.update_form("never\n")
            done = self.result("notes_update", args, requestState=first["requestState"], inputResponses=answer)
            self.assertFalse(done["structuredContent"]["updated"])
            self.assertEqual(self.snapshot(), before)
            replay = self.call(
                "notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY)
            )
            self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)
            self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.outcomes()[-2:], [audit.DECLINED, audit.NOT_CONFIRMED])

    def test_an_update_of_a_note_changed_since_the_form_is_refused_and_consumed(self) -> None:
        stale = self.result(
            "notes_update",
            {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "body": "x", "version": "0" * 32},
        )
        self.assertIn("changed since you read it", stale["content"][0]["text"])
        args, first = self.update_form("from the form\n")
        self.result(
            "notes_append",
            {
                "workspaceUri": self.notes_uri,
                "noteId": self.groceries["noteId"],
                "text": "another hand\n",
                "version": self.groceries["version"],
            },
        )
        before = self.snapshot()
        done = self.result(
            "notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY)
        )
        self.assertTrue(done["isError"])
        self.assertIn("changed", done["content"][0]["text"])
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.outcomes()[-1], audit.REFUSED)

    def test_an_update_for_a_client_without_forms_is_32021_saying_nothing_changed(self) -> None:
        before = self.snapshot()
        args = {
            "workspaceUri": self.notes_uri,
            "noteId": self.groceries["noteId"],
            "body": "x",
            "version": self.groceries["version"],
        }
        for name, arguments in (
            ("notes_update", args),
            ("notes_move", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": "m.md"}),
        ):
            error = self.call(name, arguments, capabilities={"elicitation": {"url": {}}})["error"]
            self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)
            self.assertIn("Nothing was changed", error["message"])
            self.assertIn("host that shows forms", error["message"])
            self.assertIn("--confirm-in-browser", error["message"])
            self.assertEqual(error["data"], {"requiredCapabilities": {"elicitation": {"form": {}}}})
        self.assertEqual(self.snapshot(), before)

    def test_a_diff_larger_than_a_form_shows_is_refused(self) -> None:
        big = "".join(f"line {k}\n" for k in range(notes_tools.MAX_DIFF_LINES + 1))
        done = self.result(
            "notes_update",
            {
                "workspaceUri": self.notes_uri,
                "noteId": self.groceries["noteId"],
                "body": big,
                "version": self.groceries["version"],
            },
        )
        self.assertTrue(done["isError"])
        self.assertEqual(
            done["content"][0]["text"], notes_tools.TOO_LARGE
        )  # names --confirm-in-browser, where it is reviewed whole
        self.assertEqual(self.snapshot()[0][1], self.read(self.groceries["noteId"])["text"])

    def test_audit_restore_undoes_an_update(self) -> None:
        original = self.read(self.groceries["noteId"])["text"]
        args, first = self.update_form("replaced\n")
        self.result(
            "notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY)
        )
        (entry,) = [e for e in self.store.audit_entries() if e["outcome"] == audit.UPDATED]
        self.assertEqual(entry["channel"], "form")  # the person confirmed in the host's form
        restored = self.store.restore(entry["id"])
        self.assertEqual(restored["outcome"], audit.RESTORED)
        self.assertEqual(self.read(self.groceries["noteId"])["text"], original)

    # ---------------------------------------------------------------- move

    def test_a_confirmed_move_puts_the_note_at_its_new_place_in_the_workspace(self) -> None:
        args = {
            "workspaceUri": self.notes_uri,
            "noteId": self.groceries["noteId"],
            "newPath": "archive/groceries-old.md",
        }
        first = self.result("notes_move", args)
        self.assertIn("archive/groceries-old.md", first["inputRequests"][notes_tools.MOVE_KEY]["params"]["message"])
        done = self.result(
            "notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY)
        )
        self.assertFalse(done["isError"], done)
        moved = self.read(done["structuredContent"]["noteId"])
        self.assertIn("milk", moved["text"])
        self.assertEqual(self.outcomes()[-1], audit.MOVED)

    def test_a_move_never_replaces_a_note_taken_between_the_form_and_the_accept(self) -> None:
        args = {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": "taken-place.md"}
        first = self.result("notes_move", args)
        self.assertEqual(first["resultType"], "input_required", first)
        other = self.create("Taken place", "keep me\n")  # a new note takes its title's place: taken-place.md
        self.assertTrue(
            self.store.note_text(other["noteId"], main.parse_file_uri(self.notes_uri))[0].uri.endswith(
                "/taken-place.md"
            )
        )
        before = self.snapshot()
        done = self.result(
            "notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY)
        )
        self.assertTrue(done["isError"])
        self.assertEqual(done["content"][0]["text"], note_bodies.TAKEN)
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.read(other["noteId"])["text"].rsplit("\n", 2)[-2], "keep me")

    def move_refused_before_any_form(self, new_path: str, why: str) -> None:
        """notes_move to `new_path` is an error result saying `why`, with no form, no page, no change."""
        before, entries = self.snapshot(), len(self.outcomes())
        done = self.result(
            "notes_move", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": new_path}
        )
        self.assertTrue(done["isError"], done)
        self.assertNotIn("inputRequests", done)
        self.assertEqual(done["content"][0]["text"], why)
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.outcomes()[entries:], [])  # asked nothing, wrote nothing

    def move_offered(self, new_path: str) -> dict[str, Any]:
        """notes_move to `new_path` answers with its form."""
        first = self.result(
            "notes_move", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": new_path}
        )
        self.assertEqual(first.get("resultType"), "input_required", first)
        return first

    def test_a_move_onto_an_existing_note_is_refused_before_any_form(self) -> None:
        other = self.create("Taken place", "keep me\n")
        place = self.store.note_text(other["noteId"], main.parse_file_uri(self.notes_uri))[0].uri.rsplit("/", 1)[1]
        self.move_refused_before_any_form(place, note_bodies.TAKEN)
        self.assertEqual(self.read(other["noteId"])["text"].rsplit("\n", 2)[-2], "keep me")

    def test_a_move_where_no_tool_would_reach_the_note_is_refused_before_any_form_and_the_limit_itself_is_offered(
        self,
    ) -> None:
        at, over, why = self.longest_place()
        self.move_offered(at)
        self.move_refused_before_any_form(over, why)

    def longest_place(self) -> tuple[str, str, str]:
        """A newPath at this store's limit, one just past it, and the refusal of the second."""
        raise NotImplementedError

    def test_a_confirmed_move_names_the_notes_new_place(self) -> None:
        args = {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": "archive/moved-here.md"}
        old_uri = self.store.note_text(self.groceries["noteId"], main.parse_file_uri(self.notes_uri))[0].uri
        first = self.move_offered(args["newPath"])
        done = self.result(
            "notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY)
        )
        new_uri = self.notes_uri + "/archive/moved-here.md"
        self.assertEqual(done["structuredContent"]["uri"], new_uri, done)
        self.assertIn(new_uri, done["content"][0]["text"])
        self.assertNotIn(old_uri, done["content"][0]["text"])
        moved = self.store.note_text(done["structuredContent"]["noteId"], main.parse_file_uri(self.notes_uri))
        self.assertEqual(moved[0].uri, new_uri)

    def test_a_move_to_a_path_that_leaves_or_disguises_the_workspace_is_refused(self) -> None:
        before = self.snapshot()
        for path in (
            "../Bob/x.md",
            "/etc/x.md",
            "a\\b.md",
            "%2e%2e/x.md",
            "a/\x1b.md",
            "x.txt",
            ".hidden.md",
            "a//b.md",
            "a/./b.md",
        ):
            with self.subTest(path=path):
                done = self.result(
                    "notes_move", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": path}
                )
                self.assertTrue(done["isError"])
        self.assertEqual(self.snapshot(), before)

    # =====================================================================================
    # The stores
    # =====================================================================================

    # ---------------------------------------------------------------- listing a folder

    def moved(self, note: dict[str, Any], new_path: str) -> None:
        """`note` moved to `new_path` through the confirmed notes_move."""
        args = {"workspaceUri": self.notes_uri, "noteId": note["noteId"], "newPath": new_path}
        first = self.result("notes_move", args)
        done = self.result(
            "notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY)
        )
        self.assertTrue(done["structuredContent"]["moved"], done)

    def listed(self, **arguments: Any) -> dict[str, Any]:
        done = self.result("notes_list", {"workspaceUri": self.notes_uri, **arguments})
        self.assertFalse(done["isError"], done)
        return done["structuredContent"]

    def test_list_shows_the_folders_notes_and_sub_folders_first_never_another_workspaces(self) -> None:
        self.moved(self.create("Old plan", "x"), "archive/old-plan.md")
        self.moved(self.create("Older plan", "y"), "archive/older-plan.md")
        top = self.listed()
        self.assertEqual(
            [(e["kind"], e["name"]) for e in top["entries"]],
            [("folder", "archive"), ("note", top["entries"][1]["name"])],
        )
        self.assertEqual(top["entries"][0]["notes"], 2)
        self.assertEqual(
            (top["entries"][1]["noteId"], top["entries"][1]["title"]), (self.groceries["noteId"], "Groceries")
        )
        self.assertNotIn("nextCursor", top)
        inside = self.listed(folder="archive")
        self.assertEqual([e["title"] for e in inside["entries"]], ["Old plan", "Older plan"])
        self.assertEqual({e["kind"] for e in inside["entries"]}, {"note"})
        read = self.read(inside["entries"][0]["noteId"])  # an id from the list reads
        self.assertEqual(read["title"], "Old plan")

    def test_list_pages_with_a_signed_cursor_through_every_entry_once(self) -> None:
        for k in range(5):
            self.create(f"Note {k}", "x")
        self.moved(self.create("Filed", "y"), "archive/filed.md")
        whole = self.listed(limit=notes_tools.MAX_LIST_LIMIT)["entries"]
        self.assertEqual(len(whole), 7)  # archive/, Groceries and five notes
        pages, cursor = [], None
        while True:
            page = self.listed(limit=2, **({"cursor": cursor} if cursor else {}))
            pages.append(page["entries"])
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        self.assertEqual([len(p) for p in pages], [2, 2, 2, 1])
        self.assertEqual([e for p in pages for e in p], whole)

    def test_a_forged_edited_or_borrowed_cursor_is_32602(self) -> None:
        self.create("Second", "x")
        self.moved(self.create("Filed", "y"), "archive/filed.md")
        self.moved(self.create("Filed too", "y"), "archive/filed-too.md")
        good = self.listed(limit=1)["nextCursor"]
        inner = self.listed(folder="archive", limit=1)["nextCursor"]
        state = self.result(
            "notes_update",
            {
                "workspaceUri": self.notes_uri,
                "noteId": self.groceries["noteId"],
                "body": "z",
                "version": self.groceries["version"],
            },
        )["requestState"]
        before = self.snapshot()
        flipped = good[:-2] + ("A" if good[-2] != "A" else "B") + good[-1]
        for bad in ("x", flipped, inner, state, good + "=", "\u00e9" * 10):
            error = self.call("notes_list", {"workspaceUri": self.notes_uri, "limit": 1, "cursor": bad})["error"]
            self.assertEqual(error["code"], main.INVALID_PARAMS, bad)
        self.assertEqual(
            self.call("notes_list", {"workspaceUri": self.notes_uri, "folder": "archive", "cursor": good})["error"][
                "code"
            ],
            main.INVALID_PARAMS,
        )
        self.assertEqual(self.snapshot(), before)
        self.assertIn("entries", self.listed(limit=1, cursor=good))  # the cursor as given still works

    def test_list_limits_and_hostile_folders_are_refused(self) -> None:
        self.assertIn("entries", self.listed(limit=notes_tools.MAX_LIST_LIMIT))
        for bad in (
            {"limit": notes_tools.MAX_LIST_LIMIT + 1},
            {"limit": 0},
            {"folder": "../Bob"},
            {"folder": "/etc"},
            {"folder": "archive/"},
            {"folder": "%2e%2e"},
            {"folder": ".hidden"},
            {"folder": "a\\b"},
            {"folder": "x" * (notes_tools.MAX_PATH_LENGTH + 1)},
        ):
            done = self.result("notes_list", {"workspaceUri": self.notes_uri, **bad})
            self.assertTrue(done["isError"], bad)
        other = self.result("notes_list", {"workspaceUri": self.bob_uri})
        self.assertTrue(other["isError"])
        self.assertNotIn("Bob secret", other["content"][0]["text"])

    # ---------------------------------------------------------------- creating in a folder

    def test_create_in_a_folder_of_the_workspace_puts_the_note_there_and_lists_it(self) -> None:
        done = self.result(
            "notes_create", {"workspaceUri": self.notes_uri, "title": "Filed", "body": "x", "folder": "archive"}
        )
        self.assertFalse(done["isError"], done)
        self.assertEqual(done["structuredContent"]["uri"], f"{self.notes_uri}/archive/filed.md")
        self.assertEqual([e["title"] for e in self.listed(folder="archive")["entries"]], ["Filed"])
        again = self.result(
            "notes_create", {"workspaceUri": self.notes_uri, "title": "Filed", "body": "y", "folder": "archive"}
        )
        self.assertEqual(
            again["structuredContent"]["uri"], f"{self.notes_uri}/archive/filed-2.md"
        )  # never over the first
        self.assertEqual(self.read(done["structuredContent"]["noteId"])["text"].rstrip().rsplit("\n", 1)[-1], "x")

    def test_create_into_a_hostile_or_outside_folder_is_refused_and_creates_nothing(self) -> None:
        before, entries = self.listed(limit=notes_tools.MAX_LIST_LIMIT), len(self.outcomes())
        for folder in (
            "../Bob",
            "/etc",
            "archive/",
            "%2e%2e",
            ".hidden",
            "a\\b",
            "archive/../..",
            "x\ty",
            "x" * (notes_tools.MAX_PATH_LENGTH + 1),
        ):
            done = self.result(
                "notes_create", {"workspaceUri": self.notes_uri, "title": "Planted", "body": "x", "folder": folder}
            )
            self.assertTrue(done["isError"], folder)
        self.assertEqual(self.listed(limit=notes_tools.MAX_LIST_LIMIT), before)
        self.assertEqual(len(self.outcomes()), entries)
        self.assertEqual([n.title for n in self.store.candidates(main.parse_file_uri(self.bob_uri), "Planted")], [])

    # ---------------------------------------------------------------- a move rewrites [[links]]

    def text_of(self, note: dict[str, Any]) -> str:
        found = self.store.note_text(note["noteId"], main.parse_file_uri(self.notes_uri))
        return found[1] if found else ""

    def linked(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        plan = self.create("Plan", "the plan\n")
        index = self.create("Index", "See [[plan]], [[Plan#Goals|the goals]] and [[plans]].\n")
        other = self.create("Other", "no links, only [plan] and [[ plan.md ]]\n")
        return plan, index, other

    def test_a_move_lists_the_notes_whose_links_change_and_rewrites_them_with_it_each_restorable(self) -> None:
        plan, index, other = self.linked()
        expected = self.text_of(other).replace("[[ plan.md ]]", "[[launch.md]]")
        args = {"workspaceUri": self.notes_uri, "noteId": plan["noteId"], "newPath": "archive/launch.md"}
        first = self.result("notes_move", args)
        form = first["inputRequests"][notes_tools.MOVE_KEY]["params"]
        self.assertIn("[[plan]] \u2192 [[launch]]", form["message"])
        self.assertIn("[[Plan#Goals|the goals]] \u2192 [[launch#Goals|the goals]]", form["message"])
        self.assertIn(
            '"Other"', form["message"]
        )  # [[ plan.md ]] names it too: the other form of a link, kept as written
        self.assertEqual(form["requestedSchema"]["properties"][notes_tools.REWRITE_FIELD]["default"], True)
        self.assertNotIn("[[launch]]", self.text_of(index))  # asking changed nothing
        done = self.result(
            "notes_move",
            args,
            requestState=first["requestState"],
            inputResponses={
                notes_tools.MOVE_KEY: {"action": "accept", "content": {"confirm": True, "rewriteLinks": True}}
            },
        )
        self.assertTrue(done["structuredContent"]["moved"], done)
        self.assertIn("See [[launch]], [[launch#Goals|the goals]] and [[plans]].", self.text_of(index))
        self.assertEqual(self.text_of(other), expected)
        self.assertEqual(self.outcomes()[-3:], [audit.MOVED, audit.UPDATED, audit.UPDATED])
        entry = [
            e for e in self.store.audit_entries() if e["outcome"] == audit.UPDATED and e["note_id"] == index["noteId"]
        ][0]
        self.store.restore(entry["id"])
        self.assertIn("See [[plan]], [[Plan#Goals|the goals]]", self.text_of(index))

    def test_an_unticked_rewrite_moves_the_note_and_leaves_every_link_as_it_was(self) -> None:
        plan, index, _ = self.linked()
        before = self.text_of(index)
        args = {"workspaceUri": self.notes_uri, "noteId": plan["noteId"], "newPath": "archive/launch.md"}
        first = self.result("notes_move", args)
        done = self.result(
            "notes_move",
            args,
            requestState=first["requestState"],
            inputResponses={
                notes_tools.MOVE_KEY: {"action": "accept", "content": {"confirm": True, "rewriteLinks": False}}
            },
        )
        self.assertTrue(done["structuredContent"]["moved"], done)
        self.assertEqual(self.text_of(index), before)
        self.assertEqual(self.outcomes()[-1], audit.MOVED)

    def test_a_move_asked_without_rewriting_offers_no_second_box_and_rewrites_nothing(self) -> None:
        plan, index, _ = self.linked()
        before = self.text_of(index)
        args = {"workspaceUri": self.notes_uri, "noteId": plan["noteId"], "newPath": "launch.md", "rewriteLinks": False}
        first = self.result("notes_move", args)
        self.assertNotIn(
            notes_tools.REWRITE_FIELD,
            first["inputRequests"][notes_tools.MOVE_KEY]["params"]["requestedSchema"]["properties"],
        )
        self.result("notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY))
        self.assertEqual(self.text_of(index), before)

    def test_a_linking_note_changed_after_the_form_refuses_the_move_and_nothing_moves_or_is_rewritten(self) -> None:
        plan, index, _ = self.linked()
        args = {"workspaceUri": self.notes_uri, "noteId": plan["noteId"], "newPath": "archive/launch.md"}
        first = self.result("notes_move", args)
        self.result(
            "notes_append",
            {
                "workspaceUri": self.notes_uri,
                "noteId": index["noteId"],
                "text": "[[plan]] again\n",
                "version": index["version"],
            },
        )
        before = self.text_of(index)
        done = self.result(
            "notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY)
        )
        self.assertTrue(done["isError"], done)
        self.assertEqual(done["content"][0]["text"], stores.LINKS_CHANGED)
        self.assertEqual(self.text_of(index), before)
        found = self.store.note_text(plan["noteId"], main.parse_file_uri(self.notes_uri))
        self.assertEqual(found[0].uri if found else None, plan["uri"])  # still at its old place
        self.assertEqual(self.outcomes()[-1], audit.REFUSED)

    def test_an_answer_whose_rewrite_box_is_not_a_boolean_is_32602_and_changes_nothing(self) -> None:
        plan, index, _ = self.linked()
        before = self.text_of(index)
        args = {"workspaceUri": self.notes_uri, "noteId": plan["noteId"], "newPath": "archive/launch.md"}
        first = self.result("notes_move", args)
        bad = {notes_tools.MOVE_KEY: {"action": "accept", "content": {"confirm": True, "rewriteLinks": "no"}}}
        error = self.call("notes_move", args, requestState=first["requestState"], inputResponses=bad).get("error")
        self.assertEqual(error["code"] if error else None, main.INVALID_PARAMS)
        self.assertEqual(self.text_of(index), before)
        found = self.store.note_text(plan["noteId"], main.parse_file_uri(self.notes_uri))
        self.assertEqual(found[0].uri if found else None, plan["uri"])

    def test_the_link_bounds_offer_a_rewrite_at_the_bound_and_none_past_it_saying_why(self) -> None:
        plan, index, other = self.linked()  # two notes link to plan; four notes in the workspace with Groceries
        args = {"workspaceUri": self.notes_uri, "noteId": plan["noteId"], "newPath": "archive/launch.md"}

        def offered(**bounds: int) -> tuple[bool, str]:
            with mock.patch.multiple(notes_tools, **dict[str, Any](bounds)):
                form = self.result("notes_move", args)["inputRequests"][notes_tools.MOVE_KEY]["params"]
            return notes_tools.REWRITE_FIELD in form["requestedSchema"]["properties"], form["message"]

        self.assertEqual(offered(MAX_LINKING_NOTES=2)[0], True)
        past, said = offered(MAX_LINKING_NOTES=1)
        self.assertEqual(past, False)
        self.assertIn("2 notes link to it, more than the 1 one form lists", said)
        self.assertEqual(offered(MAX_LINK_SCAN=4)[0], True)
        past, said = offered(MAX_LINK_SCAN=3)
        self.assertEqual(past, False)
        self.assertIn("more than 3 notes", said)
        texts = sum(len(self.text_of(n)) for n in (self.groceries, index, other))  # every note read but the moved one
        self.assertEqual(offered(MAX_LINK_SCAN_CHARS=texts)[0], True)
        past, said = offered(MAX_LINK_SCAN_CHARS=texts - 1)
        self.assertEqual(past, False)
        self.assertIn(f"more than {texts - 1:,} characters", said)

    def test_path_links_are_rewritten_and_a_bare_name_two_notes_share_is_not(self) -> None:
        filed = self.create("Filed", "x")
        self.moved(filed, "archive/filed.md")
        self.create("Filed", "a top-level note of the same file name")
        ref = self.create("Ref", "[[archive/filed]] [[ARCHIVE/Filed.md|x]] [[filed]]\n")
        moved_id = [e["noteId"] for e in self.listed(folder="archive")["entries"]][0]
        args = {"workspaceUri": self.notes_uri, "noteId": moved_id, "newPath": "archive/done.md"}
        first = self.result("notes_move", args)
        self.result("notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY))
        self.assertIn("[[archive/done]] [[archive/done.md|x]] [[filed]]\n", self.text_of(ref))

    # ---------------------------------------------------------------- an append keeps the version before it

    def test_an_append_keeps_the_version_before_it_and_audit_restore_puts_it_back_once(self) -> None:
        original = self.text_of(self.groceries)
        done = self.result(
            "notes_append",
            {
                "workspaceUri": self.notes_uri,
                "noteId": self.groceries["noteId"],
                "text": "butter\n",
                "version": self.groceries["version"],
            },
        )
        self.assertFalse(done["isError"], done)
        self.assertEqual(self.text_of(self.groceries), original + "butter\n")
        (entry,) = [e for e in self.store.audit_entries() if e["outcome"] == audit.APPENDED]
        self.assertTrue(entry["trash"])  # the version before the append is kept
        restored = self.store.restore(entry["id"])
        self.assertEqual(restored["outcome"], audit.RESTORED)
        self.assertEqual(self.text_of(self.groceries), original)
        with self.assertRaises(stores.StoreRefused):
            self.store.restore(entry["id"])  # once
        self.assertEqual(self.text_of(self.groceries), original)

    def place_of(self, note_id: str) -> str | None:
        found = self.store.note_text(note_id, main.parse_file_uri(self.notes_uri))
        return found[0].uri if found else None

    def test_a_move_keeps_the_old_place_and_audit_restore_moves_the_note_back_once_with_its_text_as_it_is(self) -> None:
        self.moved(self.groceries, "archive/food.md")
        (entry,) = [e for e in self.store.audit_entries() if e["outcome"] == audit.MOVED]
        moved_id = [e["noteId"] for e in self.listed(folder="archive")["entries"]][0]
        self.result(
            "notes_append",
            {
                "workspaceUri": self.notes_uri,
                "noteId": moved_id,
                "text": "after the move\n",
                "version": self.read(moved_id)["version"],
            },
        )
        text = self.text_of({"noteId": moved_id})
        restored = self.store.restore(entry["id"])
        self.assertEqual(restored["outcome"], audit.RESTORED)
        self.assertEqual(self.place_of(self.groceries["noteId"]), self.groceries["uri"])
        self.assertEqual(self.text_of(self.groceries), text)  # the place comes back; the text stays as it is now
        self.assertEqual(self.listed(folder="archive")["entries"], [])
        with self.assertRaises(stores.StoreRefused):
            self.store.restore(entry["id"])
        self.assertEqual(self.place_of(self.groceries["noteId"]), self.groceries["uri"])

    def test_restoring_a_move_whose_old_place_is_taken_is_refused_and_changes_nothing(self) -> None:
        self.moved(self.groceries, "archive/food.md")
        (entry,) = [e for e in self.store.audit_entries() if e["outcome"] == audit.MOVED]
        taker = self.create("Groceries", "a new list at the old place\n")
        self.assertEqual(taker["uri"], self.groceries["uri"])
        before = self.listed(limit=notes_tools.MAX_LIST_LIMIT), self.listed(folder="archive")
        with self.assertRaises(stores.StoreRefused):
            self.store.restore(entry["id"])
        self.assertEqual((self.listed(limit=notes_tools.MAX_LIST_LIMIT), self.listed(folder="archive")), before)
        self.assertIn("a new list at the old place", self.text_of(taker))

    # ---------------------------------------------------------------- reading a window, editing by find-and-replace

    def test_read_with_an_offset_and_length_returns_that_window_the_total_size_and_where_to_read_on(self) -> None:
        note = self.create("Long", "".join(f"line {k}\n" for k in range(2500)))  # 21,890 characters
        more = {
            "workspaceUri": self.notes_uri,
            "noteId": note["noteId"],
            "text": "\u00e9t\u00e9\n" * 4000,
            "version": note["version"],
        }
        self.assertFalse(self.result("notes_append", more)["isError"])  # 16,000 more characters, 24,000 bytes in UTF-8
        text = self.store.note_text(note["noteId"], main.parse_file_uri(self.notes_uri))[1]  # behind the tools' back
        first = self.result("notes_read", {"workspaceUri": self.notes_uri, "noteId": note["noteId"], "length": 100})[
            "structuredContent"
        ]
        self.assertEqual((first["offset"], first["text"], first["nextOffset"]), (0, text[:100], 100))
        self.assertEqual((first["length"], first["bytes"]), (len(text), len(text.encode("utf-8"))))
        self.assertTrue(first["truncated"])
        pieces, at = [], 0
        while True:
            got = self.result("notes_read", {"workspaceUri": self.notes_uri, "noteId": note["noteId"], "offset": at})[
                "structuredContent"
            ]
            self.assertLessEqual(len(got["text"]), notes_tools.MAX_READ_CHARS)
            self.assertEqual(got["version"], first["version"])  # the whole note's version, whatever the window
            pieces.append(got["text"])
            if "nextOffset" not in got:
                self.assertFalse(got["truncated"])
                break
            at = got["nextOffset"]
        self.assertEqual("".join(pieces), text)
        self.assertEqual(len(pieces), 2)

    def test_a_read_offset_past_the_end_or_a_length_outside_its_bounds_is_refused(self) -> None:
        size = len(self.read(self.groceries["noteId"])["text"])
        base = {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"]}
        at_end = self.result("notes_read", dict(base, offset=size))
        self.assertEqual((at_end["isError"], at_end["structuredContent"]["text"]), (False, ""))
        self.assertTrue(self.result("notes_read", dict(base, offset=size + 1))["isError"])
        at_bound = self.result("notes_read", dict(base, offset=notes_tools.MAX_READ_OFFSET))["content"][0]["text"]
        self.assertIn("past the end", at_bound)  # the schema accepts it; the note is shorter
        over = self.result("notes_read", dict(base, offset=notes_tools.MAX_READ_OFFSET + 1))["content"][0]["text"]
        self.assertIn("Invalid arguments", over)
        self.assertFalse(self.result("notes_read", dict(base, length=notes_tools.MAX_READ_CHARS))["isError"])
        for bad in (
            {"length": notes_tools.MAX_READ_CHARS + 1},
            {"length": 0},
            {"offset": -1},
            {"offset": notes_tools.MAX_READ_OFFSET + 1},
            {"offset": "3"},
        ):
            self.assertTrue(self.result("notes_read", dict(base, **bad))["isError"], bad)

    def edit_args(self, old: str, new: str, **more: Any) -> dict[str, Any]:
        return {
            "workspaceUri": self.notes_uri,
            "noteId": self.groceries["noteId"],
            "oldText": old,
            "newText": new,
            "version": self.groceries["version"],
            **more,
        }

    def test_an_accepted_edit_replaces_exactly_the_expected_matches_after_a_form_showing_the_diff(self) -> None:
        args = self.edit_args("eggs", "eggs\nbutter\u200b")
        first = self.result("notes_edit", args)
        self.assertEqual(first["resultType"], "input_required", first)
        message = first["inputRequests"][notes_tools.EDIT_KEY]["params"]["message"]
        self.assertIn("+butter\\u200b", message)
        self.assertIn("replace 1 occurrence ", message)
        self.assertEqual(
            self.read(self.groceries["noteId"])["version"], self.groceries["version"]
        )  # asking changed nothing
        done = self.result(
            "notes_edit", args, requestState=first["requestState"], inputResponses=accept(notes_tools.EDIT_KEY)
        )
        self.assertFalse(done["isError"], done)
        self.assertTrue(done["structuredContent"]["updated"])
        now = self.read(self.groceries["noteId"])
        self.assertTrue(now["text"].endswith("milk\neggs\nbutter\u200b\n"), now)
        self.assertEqual(now["version"], done["structuredContent"]["version"])
        self.assertEqual(self.outcomes()[-1], audit.UPDATED)
        replay = self.call(
            "notes_edit", args, requestState=first["requestState"], inputResponses=accept(notes_tools.EDIT_KEY)
        )
        self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)

    def test_an_edit_whose_match_count_is_not_the_expected_one_is_refused_before_any_form_saying_how_many(self) -> None:
        note = self.create("Counted", "ant\nbee ant\nwasp\n")
        args = {"workspaceUri": self.notes_uri, "noteId": note["noteId"], "version": note["version"]}
        before, entries = self.read(note["noteId"]), len(self.outcomes())
        for old, expected, said in (
            ("bee", 2, "occurs 1 time "),
            ("ant", 1, "occurs 2 times"),
            ("moth", 1, "occurs 0 times"),
        ):
            done = self.result("notes_edit", dict(args, oldText=old, newText="x", expectedMatches=expected))
            self.assertEqual(done["resultType"], "complete")
            self.assertTrue(done["isError"], done)
            self.assertIn(said, done["content"][0]["text"])
        same = self.result("notes_edit", dict(args, oldText="bee", newText="bee"))
        self.assertTrue(same["isError"])
        self.assertEqual(self.read(note["noteId"]), before)
        self.assertEqual(len(self.outcomes()), entries)
        both = dict(args, oldText="ant", newText="emmet", expectedMatches=2)
        first = self.result("notes_edit", both)
        self.assertEqual(first["resultType"], "input_required")
        self.result("notes_edit", both, requestState=first["requestState"], inputResponses=accept(notes_tools.EDIT_KEY))
        self.assertEqual(self.read(note["noteId"])["text"], before["text"].replace("ant", "emmet"))
        self.assertIn("emmet\nbee emmet\nwasp\n", self.read(note["noteId"])["text"])

    def test_expected_matches_is_bounded_on_both_sides(self) -> None:
        for count, refused_by_schema in (
            (0, True),
            (notes_tools.MAX_EDIT_MATCHES, False),
            (notes_tools.MAX_EDIT_MATCHES + 1, True),
        ):
            done = self.result("notes_edit", self.edit_args("milk", "x", expectedMatches=count))
            self.assertTrue(done["isError"])
            self.assertEqual("Invalid arguments" in done["content"][0]["text"], refused_by_schema, count)

    def test_an_edit_that_would_grow_the_note_past_the_stores_bound_is_refused_before_any_diff(self) -> None:
        self.assertEqual(notes_tools.MAX_EDITED_BYTES, note_bodies.MAX_NOTE_BYTES)
        self.assertEqual(notes_tools.MAX_EDITED_BYTES, folder_bodies.MAX_FILE_BYTES)
        note = self.create("Many", "x\n" * 1000)
        size = len(self.text_of(note).encode("utf-8"))
        args = {
            "workspaceUri": self.notes_uri,
            "noteId": note["noteId"],
            "oldText": "x",
            "expectedMatches": 1000,
            "version": note["version"],
        }
        room = (
            notes_tools.MAX_EDITED_BYTES - size
        ) // 1000  # bytes each match may grow by, to land at or under the bound
        at = self.result("notes_edit", dict(args, newText="x" + "y" * room))["content"][0]["text"]
        self.assertNotIn(
            "more than the", at
        )  # at the bound: not this refusal (the diff is too large for a form instead)
        over = self.result("notes_edit", dict(args, newText="x" + "y" * (room + 1)))
        self.assertTrue(over["isError"])
        self.assertIn(f"more than the {notes_tools.MAX_EDITED_BYTES:,} a note may hold", over["content"][0]["text"])
        self.assertEqual(self.read(note["noteId"])["version"], note["version"])

    def test_an_edit_confirmed_after_the_note_changed_is_refused_and_nothing_is_written(self) -> None:
        args = self.edit_args("milk", "oat milk")
        first = self.result("notes_edit", args)
        self.result(
            "notes_append",
            {
                "workspaceUri": self.notes_uri,
                "noteId": self.groceries["noteId"],
                "text": "milk again\n",
                "version": self.groceries["version"],
            },
        )
        before = self.snapshot()
        done = self.result(
            "notes_edit", args, requestState=first["requestState"], inputResponses=accept(notes_tools.EDIT_KEY)
        )
        self.assertTrue(done["isError"])
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.outcomes()[-1], audit.REFUSED)

    def test_an_edit_state_cannot_confirm_another_replacement(self) -> None:
        args = self.edit_args("milk", "oat milk")
        first = self.result("notes_edit", args)
        before = self.snapshot()
        other = self.call(
            "notes_edit",
            dict(args, newText="poison"),
            requestState=first["requestState"],
            inputResponses=accept(notes_tools.EDIT_KEY),
        )
        self.assertEqual(other["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.snapshot(), before)

    def test_audit_restore_undoes_an_edit(self) -> None:
        original = self.read(self.groceries["noteId"])["text"]
        args = self.edit_args("milk", "oat milk")
        first = self.result("notes_edit", args)
        self.result("notes_edit", args, requestState=first["requestState"], inputResponses=accept(notes_tools.EDIT_KEY))
        self.assertIn("oat milk", self.read(self.groceries["noteId"])["text"])
        (entry,) = [e for e in self.store.audit_entries() if e["outcome"] == audit.UPDATED]
        self.store.restore(entry["id"])
        self.assertEqual(self.read(self.groceries["noteId"])["text"], original)


class SqlPlaces(ContractCase):
    """The SQL stores' rule for a place: its URI at most main.MAX_URI_LENGTH characters (stores.check_note); folders
    need not exist."""

    notes_uri: str

    def longest_place(self) -> tuple[str, str, str]:
        room = main.MAX_URI_LENGTH - len(self.notes_uri + "/") - len(".md")
        wide = "\u00e9" * (room // 6)  # é is spelt %C3%A9 in a URI: 6 characters for 1 of newPath
        at = wide + "a" * (room - 6 * len(wide)) + ".md"
        self.assertEqual(len(main.format_file_uri(main.parse_file_uri(self.notes_uri) + (at,))), main.MAX_URI_LENGTH)
        return at, "b" + at, note_bodies.UNREACHABLE


class SqliteNotesTools(SqlPlaces, NotesToolsContract, unittest.TestCase):
    def open_store(self, clock: Clock) -> Any:
        folder = tempfile.mkdtemp(prefix="tools-", dir=SCRATCH)
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        store = sqlite_store.open_store(new_database(os.path.join(folder, "notes.db")), clock=clock)
        self.addCleanup(store.close)
        return store


class FolderNotesTools(NotesToolsContract, unittest.TestCase):
    def open_store(self, clock: Clock) -> Any:
        self.base = os.path.realpath(tempfile.mkdtemp(prefix="tools-folder-", dir=SCRATCH))
        state = tempfile.mkdtemp(prefix="tools-nonces-", dir=SCRATCH)
        for folder in (self.base, state):
            self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        for name in ("Notes", "Notes/archive", "Bob", "Notes-evil"):
            os.makedirs(os.path.join(self.base, name))
        nonces = sqlite_store.open_ledger(new_database(os.path.join(state, "nonces.db")), clock=clock)
        store = markdown_store.MarkdownNotesStore([self.base], nonces)
        self.addCleanup(store.close)
        return store

    def uri(self, name: str) -> str:
        return main.format_file_uri(tuple(p for p in self.base.split("/") if p) + (name,))

    def path(self, note: dict[str, Any]) -> str:
        return os.path.join(self.base, note["noteId"])

    def write_file(self, name: str, data: bytes) -> dict[str, Any]:
        with open(os.path.join(self.base, "Notes", name), "wb") as handle:
            handle.write(data)
        return self.read(f"Notes/{name}")

    def longest_place(self) -> tuple[str, str, str]:
        """The folder store's id limit: `Notes/<name>` of stores.MAX_NOTE_ID_LENGTH characters."""
        at = "n" * (stores.MAX_NOTE_ID_LENGTH - len("Notes/") - len(".md")) + ".md"
        return at, "n" + at, markdown_store.UNREACHABLE

    def test_a_move_into_a_folder_that_does_not_exist_or_is_a_file_is_refused_before_any_form(self) -> None:
        self.move_refused_before_any_form("no-such-folder/x.md", markdown_store.NO_FOLDER)
        self.write_file("plain.md", b"# Plain\n")
        self.move_refused_before_any_form("plain.md/x.md", markdown_store.NO_FOLDER)
        self.assertFalse(os.path.exists(os.path.join(self.base, "Notes", "no-such-folder")))

    def test_a_move_deeper_than_the_index_walks_is_refused_before_any_form_and_the_deepest_folder_is_offered(
        self,
    ) -> None:
        depth = folder_paths.MAX_WALK_DEPTH - 1  # Notes/ itself is the first folder below the notes folder
        os.makedirs(os.path.join(self.base, "Notes", *["d"] * (depth + 1)))
        self.move_offered("/".join(["d"] * depth + ["x.md"]))
        self.move_refused_before_any_form("/".join(["d"] * (depth + 1) + ["x.md"]), markdown_store.TOO_DEEP)

    def test_the_deepest_place_a_move_accepts_is_one_the_index_finds(self) -> None:
        depth = folder_paths.MAX_WALK_DEPTH - 1
        folders = os.path.join(self.base, "Notes", *["d"] * (depth + 1))
        os.makedirs(folders)
        for k, folder in enumerate((os.path.dirname(folders), folders)):
            with open(os.path.join(folder, f"deep{k}.md"), "w", encoding="utf-8") as handle:
                handle.write(f"# Deep{k}\n")
        found = {note.title for note in self.store.candidates(main.parse_file_uri(self.notes_uri), "Deep")}
        self.assertEqual(found, {"Deep0"})  # one folder deeper is never indexed: what TOO_DEEP refuses

    def test_a_file_name_longer_than_name_max_bytes_is_refused_before_any_form_and_one_at_it_is_offered(self) -> None:
        at = "\u65e5" * ((folder_paths.NAME_MAX - len(".md")) // 3) + ".md"  # 3 bytes each: 255 bytes in 87 characters
        over = "\u65e5" + at
        self.assertEqual(
            (len(at.encode("utf-8")), len(over.encode("utf-8"))), (folder_paths.NAME_MAX, folder_paths.NAME_MAX + 3)
        )
        self.assertLess(
            len("Notes/" + over), stores.MAX_NOTE_ID_LENGTH
        )  # the id would fit: the name's bytes are the rule
        self.move_offered(at)
        self.move_refused_before_any_form(over, markdown_store.NAME_TOO_LONG)

    def test_listing_a_missing_folder_a_file_or_a_symlink_to_another_workspace_is_refused_showing_nothing(self) -> None:
        os.symlink(os.path.join(self.base, "Bob"), os.path.join(self.base, "Notes", "linked"))
        for folder in ("missing", self.groceries["noteId"].rsplit("/", 1)[1], "linked"):
            done = self.result("notes_list", {"workspaceUri": self.notes_uri, "folder": folder})
            self.assertTrue(done["isError"], folder)
            self.assertNotIn("Bob secret", done["content"][0]["text"])
            self.assertNotIn("structuredContent", done)

    def test_create_into_a_missing_folder_a_file_a_symlink_or_one_too_deep_is_refused_and_no_folder_is_made(
        self,
    ) -> None:
        os.symlink(os.path.join(self.base, "Bob"), os.path.join(self.base, "Notes", "linked"))
        depth = folder_paths.MAX_WALK_DEPTH - 1  # Notes/ itself is the first folder below the notes folder
        os.makedirs(os.path.join(self.base, "Notes", *["d"] * (depth + 1)))
        name = self.groceries["noteId"].rsplit("/", 1)[1]
        before = sorted(os.walk(self.base))
        for folder, said in (
            ("missing", markdown_store.NO_FOLDER),
            ("missing/deeper", markdown_store.NO_FOLDER),
            (name, markdown_store.NO_FOLDER),
            ("linked", markdown_store.NO_FOLDER),
            ("/".join(["d"] * (depth + 1)), markdown_store.TOO_DEEP),
        ):
            done = self.result(
                "notes_create", {"workspaceUri": self.notes_uri, "title": "Planted", "body": "x", "folder": folder}
            )
            self.assertEqual((done["isError"], done["content"][0]["text"]), (True, said), folder)
        self.assertEqual(sorted(os.walk(self.base)), before)
        self.assertEqual(os.listdir(os.path.join(self.base, "Bob")), [self.bobs["noteId"].rsplit("/", 1)[1]])
        deepest = self.result(
            "notes_create",
            {"workspaceUri": self.notes_uri, "title": "Deep", "body": "x", "folder": "/".join(["d"] * depth)},
        )
        self.assertFalse(deepest["isError"], deepest)
        self.assertEqual(self.read(deepest["structuredContent"]["noteId"])["title"], "Deep")

    def test_a_link_rewrite_the_os_refuses_after_the_rename_leaves_the_move_done_audited_and_that_link_as_it_was(
        self,
    ) -> None:
        plan, index, _ = self.linked()
        before = self.text_of(index)
        args = {"workspaceUri": self.notes_uri, "noteId": plan["noteId"], "newPath": "archive/launch.md"}
        first = self.result("notes_move", args)
        with mock.patch.object(folder_bodies, "replace", side_effect=stores.StoreRefused(folder_bodies.WRITE_REFUSED)):
            done = self.result(
                "notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY)
            )
        self.assertTrue(done["structuredContent"]["moved"], done)
        self.assertTrue(os.path.exists(os.path.join(self.base, "Notes", "archive", "launch.md")))
        self.assertEqual(self.text_of(index), before)
        self.assertEqual(self.outcomes()[-3:], [audit.MOVED, audit.REFUSED, audit.REFUSED])

    def test_frontmatter_survives_append_and_update_byte_for_byte(self) -> None:
        front = b"---\r\ntitle: Plan\ntags: [a, b]\n---\n"
        note = self.write_file("plan.md", front + b"# Plan\nfirst\n")
        self.assertEqual(note["text"], "# Plan\nfirst\n")  # the frontmatter is not part of the text
        self.result(
            "notes_append",
            {"workspaceUri": self.notes_uri, "noteId": note["noteId"], "text": "second\n", "version": note["version"]},
        )
        note = self.read(note["noteId"])
        args = {
            "workspaceUri": self.notes_uri,
            "noteId": note["noteId"],
            "body": "# Plan\nrewritten\n",
            "version": note["version"],
        }
        first = self.result("notes_update", args)
        self.result(
            "notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY)
        )
        with open(os.path.join(self.base, "Notes", "plan.md"), "rb") as handle:
            self.assertEqual(handle.read(), front + b"# Plan\nrewritten\n")
        kept = []
        for name in os.listdir(os.path.join(self.base, ".trash")):
            with open(os.path.join(self.base, ".trash", name), "rb") as handle:
                kept.append(handle.read())
        # The version before the append and the one before the update, each with its frontmatter.
        self.assertEqual(sorted(kept), [front + b"# Plan\nfirst\n", front + b"# Plan\nfirst\nsecond\n"])

    def test_a_note_that_is_a_symlink_is_never_read_or_written(self) -> None:
        outside = tempfile.NamedTemporaryFile(delete=False, suffix=".md")
        outside.write(b"# Outside\nsecret\n")
        outside.close()
        self.addCleanup(os.unlink, outside.name)
        os.symlink(outside.name, os.path.join(self.base, "Notes", "link.md"))
        self.assertTrue(
            self.result("notes_read", {"workspaceUri": self.notes_uri, "noteId": "Notes/link.md"})["isError"]
        )
        found = self.result("notes_search", {"workspaceUri": self.notes_uri, "query": "secret"})["structuredContent"]
        self.assertEqual(found["results"], [])
        with open(outside.name, "rb") as handle:
            self.assertEqual(handle.read(), b"# Outside\nsecret\n")

    def test_a_created_note_never_replaces_a_file_of_the_same_name(self) -> None:
        self.write_file("dup.md", b"# Dup\nmine\n")
        made = self.create("Dup", "new")
        self.assertEqual(made["noteId"], "Notes/dup-2.md")
        with open(os.path.join(self.base, "Notes", "dup.md"), "rb") as handle:
            self.assertEqual(handle.read(), b"# Dup\nmine\n")

    def test_a_file_larger_than_the_tools_read_is_not_served_to_them(self) -> None:
        big = self.write_file("big.md", b"# Big\n" + b"x" * (folder_bodies.MAX_FILE_BYTES - 6))  # exactly at the bound
        self.assertEqual(big["length"], folder_bodies.MAX_FILE_BYTES)
        with open(os.path.join(self.base, "Notes", "big.md"), "ab") as handle:
            handle.write(b"y")
        self.assertTrue(
            self.result("notes_read", {"workspaceUri": self.notes_uri, "noteId": "Notes/big.md"})["isError"]
        )


PG = store_workers.OptionalCluster()
setUpModule, tearDownModule = PG.start, PG.stop  # only the PostgreSQL class skips


class PostgresNotesTools(SqlPlaces, NotesToolsContract, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        PG.require()

    def open_store(self, clock: Clock) -> Any:
        store = postgres_store.open_store(PG.require().new_database(), clock=clock)
        self.addCleanup(store.close)
        return store


# =====================================================================================
# The option, the memory store, what a person is shown
# =====================================================================================


class OptIn(unittest.TestCase):
    def list_names(self, server: frame.Server) -> list[str]:
        response = server.handle(request("tools/list"), PRINCIPAL)
        assert response is not None
        return [tool["name"] for tool in response["result"]["tools"]]

    def memory_server(self) -> frame.Server:
        clock = Clock()
        store = stores.MemoryStore(main.lesson_notes(), main.MemoryReplayStore(clock))
        policy = main.AuthorizationPolicy({PRINCIPAL: [main.LESSON_WORKSPACE]})
        return frame.notes_server(keys=[KEY], notes=store, replay=store.replay, policy=policy, clock=clock, log=Log())

    def test_tools_list_without_the_option_is_notes_delete_alone(self) -> None:
        self.assertEqual(self.list_names(self.memory_server()), [main.TOOL_NAME])

    def test_with_the_option_the_note_tools_follow_notes_delete_with_truthful_annotations(self) -> None:
        server = self.memory_server()
        notes_tools.install(server)
        self.assertEqual(
            self.list_names(server),
            [
                main.TOOL_NAME,
                "notes_workspaces",
                "notes_list",
                "notes_search",
                "notes_read",
                "notes_create",
                "notes_append",
                "notes_update",
                "notes_edit",
                "notes_move",
            ],
        )
        tools = {
            tool["name"]: tool["annotations"]
            for tool in answered(server, request("tools/list"), PRINCIPAL)["result"]["tools"]
        }
        for name in ("notes_workspaces", "notes_list", "notes_search", "notes_read"):
            self.assertEqual((tools[name]["readOnlyHint"], tools[name]["destructiveHint"]), (True, False))
        for name in ("notes_create", "notes_append"):
            self.assertEqual((tools[name]["readOnlyHint"], tools[name]["destructiveHint"]), (False, False))
        for name in ("notes_update", "notes_edit", "notes_move"):
            self.assertEqual((tools[name]["readOnlyHint"], tools[name]["destructiveHint"]), (False, True))
        self.assertFalse(tools["notes_create"]["idempotentHint"])
        self.assertTrue(all(not hints["openWorldHint"] for hints in tools.values()))

    def test_the_memory_store_lists_workspaces_but_says_it_keeps_no_bodies(self) -> None:
        server = self.memory_server()
        notes_tools.install(server)
        listed = answered(server, tools_call("notes_workspaces", {}), PRINCIPAL)["result"]
        self.assertEqual(listed["structuredContent"], {"workspaces": [main.LESSON_WORKSPACE]})
        before = [note.id for note in server.services.notes.all()]
        done = answered(
            server, tools_call("notes_search", {"workspaceUri": main.LESSON_WORKSPACE, "query": "TPS"}), PRINCIPAL
        )["result"]
        self.assertTrue(done["isError"])
        self.assertEqual(done["content"][0]["text"], notes_tools.NO_BODIES)
        self.assertEqual([note.id for note in server.services.notes.all()], before)

    def test_a_move_over_the_memory_store_is_refused_before_any_form_saying_it_keeps_no_bodies(self) -> None:
        server = self.memory_server()
        notes_tools.install(server)
        before = server.services.notes.all()
        arguments = {"workspaceUri": main.LESSON_WORKSPACE, "noteId": before[0].id, "newPath": "moved.md"}
        done = answered(server, tools_call("notes_move", arguments), PRINCIPAL)["result"]
        self.assertTrue(done["isError"])
        self.assertNotIn("inputRequests", done)
        self.assertEqual(done["content"][0]["text"], notes_tools.NO_BODIES)
        self.assertEqual(server.services.notes.all(), before)

    def test_workspaces_names_only_the_callers_own(self) -> None:
        server = self.memory_server()
        notes_tools.install(server)
        other = answered(server, tools_call("notes_workspaces", {}), "mallory")["result"]
        self.assertEqual(other["structuredContent"], {"workspaces": []})

    def test_arguments_that_are_not_an_object_are_32602_and_an_unknown_one_is_an_error_result(self) -> None:
        server = self.memory_server()
        notes_tools.install(server)
        not_an_object: Any = []  # hostile arguments: a list where the schema says object
        self.assertEqual(
            answered(server, tools_call("notes_read", not_an_object), PRINCIPAL)["error"]["code"], main.INVALID_PARAMS
        )
        done = answered(
            server,
            tools_call("notes_read", {"workspaceUri": main.LESSON_WORKSPACE, "noteId": "x", "extra": 1}),
            PRINCIPAL,
        )["result"]
        self.assertTrue(done["isError"])
        query = "q" * notes_tools.MAX_QUERY_LENGTH
        at = answered(
            server, tools_call("notes_search", {"workspaceUri": main.LESSON_WORKSPACE, "query": query}), PRINCIPAL
        )["result"]
        self.assertEqual(at["content"][0]["text"], notes_tools.NO_BODIES)  # the length passed; the store answered
        over = answered(
            server, tools_call("notes_search", {"workspaceUri": main.LESSON_WORKSPACE, "query": query + "q"}), PRINCIPAL
        )["result"]
        self.assertIn("must be a string", over["content"][0]["text"])


class ArgumentsStatedOnce(unittest.TestCase):
    """Each note tool states its arguments once, in its inputSchema: a call is held to exactly what the schema says."""

    def server(self) -> frame.Server:
        clock = Clock()
        store = stores.MemoryStore(main.lesson_notes(), main.MemoryReplayStore(clock))
        policy = main.AuthorizationPolicy({PRINCIPAL: [main.LESSON_WORKSPACE]})
        server = frame.notes_server(keys=[KEY], notes=store, replay=store.replay, policy=policy, clock=clock, log=Log())
        notes_tools.install(server)
        return server

    @staticmethod
    def value(field: dict[str, Any], size: int) -> Any:
        return size if field["type"] == "integer" else "x" * size

    def least(self, field: dict[str, Any]) -> Any:
        """A value the field accepts: true, or its smallest (and never empty) integer or text."""
        if field["type"] == "boolean":
            return True
        return self.value(field, max(field.get("minimum", field.get("minLength", 0)), 1))

    def test_every_bound_a_schema_states_is_the_bound_its_call_enforces_on_both_sides(self) -> None:
        server = self.server()
        checked = 0
        for tool in notes_tools.TOOLS:
            schema = tool.descriptor["inputSchema"]
            fields = schema["properties"]
            for name, field in fields.items():
                if field["type"] == "boolean":
                    continue
                low = field.get("minimum", field.get("minLength", 0))
                high = field.get("maximum", field.get("maxLength"))
                valid = {key: self.least(other) for key, other in fields.items() if key in schema["required"]}
                for size, refused in ((low - 1, True), (low, False), (high, False), (high + 1, True)):
                    if size < 0:
                        continue
                    with self.subTest(tool=tool.descriptor["name"], field=name, size=size):
                        before = [note.id for note in server.services.notes.all()]
                        message = tools_call(tool.descriptor["name"], {**valid, name: self.value(field, size)})
                        response = server.handle(message, PRINCIPAL)
                        assert response is not None
                        said = (
                            response["result"]["content"][0]["text"]
                            if "result" in response
                            else response["error"]["message"]
                        )
                        self.assertEqual(f"{name} must be" in said, refused, said)
                        self.assertEqual([note.id for note in server.services.notes.all()], before)
                        checked += 1
        self.assertGreater(checked, 40)


class TheOption(unittest.TestCase):
    """`--notes-tools` and the config's `notesTools` turn the tools on; neither leaves them off."""

    def listed(self, argv: list[str], config: dict[str, Any] | None = None) -> list[str]:
        import json

        import serve

        folder = tempfile.mkdtemp(prefix="tools-option-")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        if config is not None:
            path = os.path.join(folder, "config.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(config, handle)
            argv = [*argv, "--config", path]
        saved = os.environ.get("NOTES_MCP_SECRET")
        os.environ["NOTES_MCP_SECRET"] = KEY.hex()
        try:
            server, *_ = serve.start(["--stdio", "--db", os.path.join(folder, "n.db"), *argv])
        finally:
            if saved is None:
                del os.environ["NOTES_MCP_SECRET"]
            else:
                os.environ["NOTES_MCP_SECRET"] = saved
        self.addCleanup(server.notes.close)
        return [tool["name"] for tool in answered(server, request("tools/list"), PRINCIPAL)["result"]["tools"]]

    def test_the_flag_or_the_config_key_serves_the_note_tools_and_neither_does_not(self) -> None:
        config = {
            "principals": {PRINCIPAL: {"token": "t-" + KEY.hex(), "workspaces": [main.LESSON_WORKSPACE]}},
            "stdioPrincipal": PRINCIPAL,
        }
        self.assertEqual(self.listed([]), [main.TOOL_NAME])
        self.assertIn("notes_update", self.listed(["--notes-tools"]))
        self.assertIn("notes_update", self.listed([], dict(config, notesTools=True)))
        self.assertEqual(self.listed([], dict(config, notesTools=False)), [main.TOOL_NAME])


class WhatAPersonSees(unittest.TestCase):
    def test_tabs_zero_width_and_bidi_characters_are_shown_as_escapes_and_a_backslash_is_doubled(self) -> None:
        self.assertEqual(notes_tools.visible("a\tb\u200bc\u202ed\\u"), "a\\u0009b\\u200bc\\u202ed\\\\u")
        self.assertEqual(notes_tools.visible("plain text"), "plain text")

    def test_a_diff_is_whole_or_refused(self) -> None:
        small = notes_tools.unified_diff("a\nb\n", "a\nc\n")
        self.assertIn("-b", small or "")
        self.assertIn("+c", small or "")
        lines = notes_tools.MAX_DIFF_LINES - 4  # the two file lines, the hunk line, and the unchanged ""
        self.assertIsNotNone(notes_tools.unified_diff("", "".join(f"{k}\n" for k in range(lines - 1))))
        self.assertIsNone(notes_tools.unified_diff("", "".join(f"{k}\n" for k in range(notes_tools.MAX_DIFF_LINES))))

    def test_frontmatter_is_split_only_when_it_is_closed(self) -> None:
        self.assertEqual(folder_bodies.split_frontmatter(b"---\na: 1\n---\nbody"), (b"---\na: 1\n---\n", b"body"))
        self.assertEqual(folder_bodies.split_frontmatter(b"---\na: 1\nbody"), (b"", b"---\na: 1\nbody"))
        self.assertEqual(folder_bodies.split_frontmatter(b"# x\n---\n"), (b"", b"# x\n---\n"))


if __name__ == "__main__":
    unittest.main()


class LinkRewrites(unittest.TestCase):
    """notes_tools.relinked on its own: which [[links]] name a place, and how each is rewritten."""

    def test_each_form_of_a_link_is_rewritten_in_its_own_form_and_others_are_left_alone(self) -> None:
        text = "[[plan]] [[Plan.md#Goals|g]] [[a/plan]] [[A/PLAN.md|x]] [[planning]] [[b/plan]] [plan] [[plan"
        new, changes = notes_tools.relinked(text, ("a", "plan.md"), ("b", "new.md"), bare=True)
        self.assertEqual(
            new, "[[new]] [[new.md#Goals|g]] [[b/new]] [[b/new.md|x]] [[planning]] [[b/plan]] [plan] [[plan"
        )
        self.assertEqual(len(changes), 4)

    def test_a_bare_name_another_note_shares_and_a_move_that_keeps_the_name_change_no_bare_link(self) -> None:
        self.assertEqual(
            notes_tools.relinked("[[plan]] [[a/plan]]", ("a", "plan.md"), ("b", "new.md"), bare=False)[0],
            "[[plan]] [[b/new]]",
        )
        self.assertEqual(
            notes_tools.relinked("[[plan]] [[a/plan]]", ("a", "plan.md"), ("b", "plan.md"), bare=True)[0],
            "[[plan]] [[b/plan]]",
        )

    def test_a_place_without_md_is_named_by_its_whole_name(self) -> None:
        self.assertEqual(
            notes_tools.relinked("[[tps]] [[x/tps]]", ("x", "tps"), ("y", "tps.md"), bare=True)[0], "[[tps]] [[y/tps]]"
        )
