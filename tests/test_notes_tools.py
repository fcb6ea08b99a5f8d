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

from helpers.support import FORM, KEY, PRINCIPAL, Clock, Log, request

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
from helpers import store_workers

OTHER = "bob"


def tools_call(name: str, arguments: dict[str, Any], capabilities: Any = FORM, **extra: Any) -> dict[str, Any]:
    """A tools/call of a note tool."""
    return request("tools/call", {"name": name, "arguments": arguments, **extra}, capabilities=capabilities)


def accept(key: str, confirm: bool = True) -> dict[str, Any]:
    return {key: {"action": "accept", "content": {notes_tools.CONFIRM_FIELD: confirm}}}


class NotesToolsContract:
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
        done = self.result("notes_create", {"workspaceUri": workspace or self.notes_uri, "title": title, "body": body}, principal)
        self.assertFalse(done["isError"], done)
        return done["structuredContent"]

    def read(self, note_id: str, principal: str = PRINCIPAL, workspace: str | None = None) -> dict[str, Any]:
        done = self.result("notes_read", {"workspaceUri": workspace or self.notes_uri, "noteId": note_id}, principal)
        self.assertFalse(done["isError"], done)
        return done["structuredContent"]

    def snapshot(self) -> list[tuple[str, str]]:
        """Every note the tests made, as (id, text), read behind the tools' back."""
        seen = []
        for note, workspace in ((self.groceries, self.notes_uri), (self.bobs, self.bob_uri), (self.evil, self.evil_uri)):
            found = self.store.note_text(note["noteId"], main.parse_file_uri(workspace))
            seen.append((note["noteId"], found[1] if found else None))
        return seen

    def outcomes(self) -> list[str]:
        return [entry["outcome"] for entry in self.store.audit_entries()]

    def update_form(self, body: str, version: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        args = {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "body": body,
                "version": version or self.groceries["version"]}
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
        self.assertEqual([r["noteId"] for r in by_title["results"]], [self.groceries["noteId"]])  # never the Notes-evil look-alike

    def test_a_search_returns_at_most_its_limit_and_says_there_are_more(self) -> None:
        self.create("Groceries two", "milk")
        found = self.result("notes_search", {"workspaceUri": self.notes_uri, "query": "milk", "limit": 1})["structuredContent"]
        self.assertEqual(len(found["results"]), 1)
        self.assertTrue(found["more"])
        at_bound = self.result("notes_search", {"workspaceUri": self.notes_uri, "query": "milk", "limit": notes_tools.MAX_SEARCH_LIMIT})
        self.assertFalse(at_bound["isError"])
        over = self.result("notes_search", {"workspaceUri": self.notes_uri, "query": "milk", "limit": notes_tools.MAX_SEARCH_LIMIT + 1})
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
        self.assertTrue(self.result("notes_read", {"workspaceUri": self.notes_uri, "noteId": self.bobs["noteId"]})["isError"])
        self.assertEqual(self.snapshot(), before)
        # Every refusal leaves one `refused` entry and nothing else: 6 tools x 4 workspaces
        # refused at layer 1 (the update and move refused at their form check, before it, are
        # not: they never reach the store), and the read of another folder's id at layer 2.
        refused = self.outcomes()[len(entries):]
        self.assertEqual(set(refused), {audit.REFUSED})
        self.assertEqual(len(refused), len(bad) * 6 + 1)

    # ---------------------------------------------------------------- append

    def test_append_adds_at_the_end_and_a_stale_version_is_refused(self) -> None:
        args = {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "text": "bread\n", "version": self.groceries["version"]}
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
        self.assertEqual(self.read(self.groceries["noteId"])["version"], self.groceries["version"])  # asking changed nothing
        done = self.result("notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY))
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
        response = self.call("notes_update", other, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY))
        self.assertEqual(response["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.snapshot(), before)
        # The state was not consumed by the refusal: the shown bytes can still be confirmed.
        done = self.result("notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY))
        self.assertTrue(self.read(self.groceries["noteId"])["text"].endswith("shown text\n"), done)

    def test_a_declined_or_unticked_update_changes_nothing_and_ends_the_confirmation(self) -> None:
        before = self.snapshot()
        for answer in ({notes_tools.UPDATE_KEY: {"action": "decline"}}, accept(notes_tools.UPDATE_KEY, confirm=False)):
            args, first = self.update_form("never\n")
            done = self.result("notes_update", args, requestState=first["requestState"], inputResponses=answer)
            self.assertFalse(done["structuredContent"]["updated"])
            self.assertEqual(self.snapshot(), before)
            replay = self.call("notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY))
            self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)
            self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.outcomes()[-2:], [audit.DECLINED, audit.NOT_CONFIRMED])

    def test_an_update_of_a_note_changed_since_the_form_is_refused_and_consumed(self) -> None:
        stale = self.result("notes_update", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "body": "x", "version": "0" * 32})
        self.assertIn("changed since you read it", stale["content"][0]["text"])
        args, first = self.update_form("from the form\n")
        self.result("notes_append", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "text": "another hand\n",
                                     "version": self.groceries["version"]})
        before = self.snapshot()
        done = self.result("notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY))
        self.assertTrue(done["isError"])
        self.assertIn("changed", done["content"][0]["text"])
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.outcomes()[-1], audit.REFUSED)

    def test_an_update_for_a_client_without_forms_is_32021_saying_nothing_changed(self) -> None:
        before = self.snapshot()
        args = {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "body": "x", "version": self.groceries["version"]}
        for name, arguments in (("notes_update", args), ("notes_move", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": "m.md"})):
            error = self.call(name, arguments, capabilities={"elicitation": {"url": {}}})["error"]
            self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)
            self.assertIn("Nothing was changed", error["message"])
            self.assertIn("host that shows forms", error["message"])
            self.assertIn("--confirm-in-browser", error["message"])
            self.assertEqual(error["data"], {"requiredCapabilities": {"elicitation": {"form": {}}}})
        self.assertEqual(self.snapshot(), before)

    def test_a_diff_larger_than_a_form_shows_is_refused(self) -> None:
        big = "".join(f"line {k}\n" for k in range(notes_tools.MAX_DIFF_LINES + 1))
        done = self.result("notes_update", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "body": big,
                                            "version": self.groceries["version"]})
        self.assertTrue(done["isError"])
        self.assertEqual(done["content"][0]["text"], notes_tools.TOO_LARGE)  # names --confirm-in-browser, where it is reviewed whole
        self.assertEqual(self.snapshot()[0][1], self.read(self.groceries["noteId"])["text"])

    def test_audit_restore_undoes_an_update(self) -> None:
        original = self.read(self.groceries["noteId"])["text"]
        args, first = self.update_form("replaced\n")
        self.result("notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY))
        (entry,) = [e for e in self.store.audit_entries() if e["outcome"] == audit.UPDATED]
        self.assertEqual(entry["channel"], "form")  # the person confirmed in the host's form
        restored = self.store.restore(entry["id"])
        self.assertEqual(restored["outcome"], audit.RESTORED)
        self.assertEqual(self.read(self.groceries["noteId"])["text"], original)

    # ---------------------------------------------------------------- move

    def test_a_confirmed_move_puts_the_note_at_its_new_place_in_the_workspace(self) -> None:
        args = {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": "archive/groceries-old.md"}
        first = self.result("notes_move", args)
        self.assertIn("archive/groceries-old.md", first["inputRequests"][notes_tools.MOVE_KEY]["params"]["message"])
        done = self.result("notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY))
        self.assertFalse(done["isError"], done)
        moved = self.read(done["structuredContent"]["noteId"])
        self.assertIn("milk", moved["text"])
        self.assertEqual(self.outcomes()[-1], audit.MOVED)

    def test_a_move_never_replaces_a_note_taken_between_the_form_and_the_accept(self) -> None:
        args = {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": "taken-place.md"}
        first = self.result("notes_move", args)
        self.assertEqual(first["resultType"], "input_required", first)
        other = self.create("Taken place", "keep me\n")  # a new note takes its title's place: taken-place.md
        self.assertTrue(self.store.note_text(other["noteId"], main.parse_file_uri(self.notes_uri))[0].uri.endswith("/taken-place.md"))
        before = self.snapshot()
        done = self.result("notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY))
        self.assertTrue(done["isError"])
        self.assertEqual(done["content"][0]["text"], note_bodies.TAKEN)
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.read(other["noteId"])["text"].rsplit("\n", 2)[-2], "keep me")

    def move_refused_before_any_form(self, new_path: str, why: str) -> None:
        """notes_move to `new_path` is an error result saying `why`, with no form, no page, no change."""
        before, entries = self.snapshot(), len(self.outcomes())
        done = self.result("notes_move", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": new_path})
        self.assertTrue(done["isError"], done)
        self.assertNotIn("inputRequests", done)
        self.assertEqual(done["content"][0]["text"], why)
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.outcomes()[entries:], [])  # asked nothing, wrote nothing

    def move_offered(self, new_path: str) -> dict[str, Any]:
        """notes_move to `new_path` answers with its form."""
        first = self.result("notes_move", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": new_path})
        self.assertEqual(first.get("resultType"), "input_required", first)
        return first

    def test_a_move_onto_an_existing_note_is_refused_before_any_form(self) -> None:
        other = self.create("Taken place", "keep me\n")
        place = self.store.note_text(other["noteId"], main.parse_file_uri(self.notes_uri))[0].uri.rsplit("/", 1)[1]
        self.move_refused_before_any_form(place, note_bodies.TAKEN)
        self.assertEqual(self.read(other["noteId"])["text"].rsplit("\n", 2)[-2], "keep me")

    def test_a_move_where_no_tool_would_reach_the_note_is_refused_before_any_form_and_the_limit_itself_is_offered(self) -> None:
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
        done = self.result("notes_move", args, requestState=first["requestState"], inputResponses=accept(notes_tools.MOVE_KEY))
        new_uri = self.notes_uri + "/archive/moved-here.md"
        self.assertEqual(done["structuredContent"]["uri"], new_uri, done)
        self.assertIn(new_uri, done["content"][0]["text"])
        self.assertNotIn(old_uri, done["content"][0]["text"])
        moved = self.store.note_text(done["structuredContent"]["noteId"], main.parse_file_uri(self.notes_uri))
        self.assertEqual(moved[0].uri, new_uri)

    def test_a_move_to_a_path_that_leaves_or_disguises_the_workspace_is_refused(self) -> None:
        before = self.snapshot()
        for path in ("../Bob/x.md", "/etc/x.md", "a\\b.md", "%2e%2e/x.md", "a/\x1b.md", "x.txt", ".hidden.md", "a//b.md", "a/./b.md"):
            with self.subTest(path=path):
                done = self.result("notes_move", {"workspaceUri": self.notes_uri, "noteId": self.groceries["noteId"], "newPath": path})
                self.assertTrue(done["isError"])
        self.assertEqual(self.snapshot(), before)


# =====================================================================================
# The stores
# =====================================================================================


class SqlPlaces:
    """The SQL stores' rule for a place: its URI at most main.MAX_URI_LENGTH characters (stores.check_note); folders need not exist."""

    notes_uri: str

    def longest_place(self) -> tuple[str, str, str]:
        room = main.MAX_URI_LENGTH - len(self.notes_uri + "/") - len(".md")
        wide = "\u00e9" * (room // 6)  # é is spelt %C3%A9 in a URI: 6 characters for 1 of newPath
        at = wide + "a" * (room - 6 * len(wide)) + ".md"
        self.assertEqual(len(main.format_file_uri(main.parse_file_uri(self.notes_uri) + (at,))), main.MAX_URI_LENGTH)
        return at, "b" + at, note_bodies.UNREACHABLE


class SqliteNotesTools(SqlPlaces, NotesToolsContract, unittest.TestCase):
    def open_store(self, clock: Clock) -> Any:
        folder = tempfile.mkdtemp(prefix="tools-")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        store = sqlite_store.open_store(os.path.join(folder, "notes.db"), clock=clock)
        self.addCleanup(store.close)
        return store


class FolderNotesTools(NotesToolsContract, unittest.TestCase):
    def open_store(self, clock: Clock) -> Any:
        self.base = os.path.realpath(tempfile.mkdtemp(prefix="tools-folder-"))
        state = tempfile.mkdtemp(prefix="tools-nonces-")
        for folder in (self.base, state):
            self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        for name in ("Notes", "Notes/archive", "Bob", "Notes-evil"):
            os.makedirs(os.path.join(self.base, name))
        nonces = sqlite_store.open_ledger(os.path.join(state, "nonces.db"), clock=clock)
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

    def test_a_move_deeper_than_the_index_walks_is_refused_before_any_form_and_the_deepest_folder_is_offered(self) -> None:
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
        self.assertEqual((len(at.encode("utf-8")), len(over.encode("utf-8"))), (folder_paths.NAME_MAX, folder_paths.NAME_MAX + 3))
        self.assertLess(len("Notes/" + over), stores.MAX_NOTE_ID_LENGTH)  # the id would fit: the name's bytes are the rule
        self.move_offered(at)
        self.move_refused_before_any_form(over, markdown_store.NAME_TOO_LONG)

    def test_frontmatter_survives_append_and_update_byte_for_byte(self) -> None:
        front = b"---\r\ntitle: Plan\ntags: [a, b]\n---\n"
        note = self.write_file("plan.md", front + b"# Plan\nfirst\n")
        self.assertEqual(note["text"], "# Plan\nfirst\n")  # the frontmatter is not part of the text
        self.result("notes_append", {"workspaceUri": self.notes_uri, "noteId": note["noteId"], "text": "second\n", "version": note["version"]})
        note = self.read(note["noteId"])
        args = {"workspaceUri": self.notes_uri, "noteId": note["noteId"], "body": "# Plan\nrewritten\n", "version": note["version"]}
        first = self.result("notes_update", args)
        self.result("notes_update", args, requestState=first["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY))
        with open(os.path.join(self.base, "Notes", "plan.md"), "rb") as handle:
            self.assertEqual(handle.read(), front + b"# Plan\nrewritten\n")
        kept = os.listdir(os.path.join(self.base, ".trash"))
        self.assertEqual(len(kept), 1)
        with open(os.path.join(self.base, ".trash", kept[0]), "rb") as handle:
            self.assertEqual(handle.read(), front + b"# Plan\nfirst\nsecond\n")

    def test_a_note_that_is_a_symlink_is_never_read_or_written(self) -> None:
        outside = tempfile.NamedTemporaryFile(delete=False, suffix=".md")
        outside.write(b"# Outside\nsecret\n")
        outside.close()
        self.addCleanup(os.unlink, outside.name)
        os.symlink(outside.name, os.path.join(self.base, "Notes", "link.md"))
        self.assertTrue(self.result("notes_read", {"workspaceUri": self.notes_uri, "noteId": "Notes/link.md"})["isError"])
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
        self.assertTrue(self.result("notes_read", {"workspaceUri": self.notes_uri, "noteId": "Notes/big.md"})["isError"])


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
        self.assertEqual(self.list_names(server), [main.TOOL_NAME, "notes_workspaces", "notes_search", "notes_read", "notes_create",
                                                   "notes_append", "notes_update", "notes_move"])
        tools = {tool["name"]: tool["annotations"] for tool in server.handle(request("tools/list"), PRINCIPAL)["result"]["tools"]}
        for name in ("notes_workspaces", "notes_search", "notes_read"):
            self.assertEqual((tools[name]["readOnlyHint"], tools[name]["destructiveHint"]), (True, False))
        for name in ("notes_create", "notes_append"):
            self.assertEqual((tools[name]["readOnlyHint"], tools[name]["destructiveHint"]), (False, False))
        for name in ("notes_update", "notes_move"):
            self.assertEqual((tools[name]["readOnlyHint"], tools[name]["destructiveHint"]), (False, True))
        self.assertFalse(tools["notes_create"]["idempotentHint"])
        self.assertTrue(all(not hints["openWorldHint"] for hints in tools.values()))

    def test_the_memory_store_lists_workspaces_but_says_it_keeps_no_bodies(self) -> None:
        server = self.memory_server()
        notes_tools.install(server)
        listed = server.handle(tools_call("notes_workspaces", {}), PRINCIPAL)["result"]
        self.assertEqual(listed["structuredContent"], {"workspaces": [main.LESSON_WORKSPACE]})
        before = [note.id for note in server.services.notes.all()]
        done = server.handle(tools_call("notes_search", {"workspaceUri": main.LESSON_WORKSPACE, "query": "TPS"}), PRINCIPAL)["result"]
        self.assertTrue(done["isError"])
        self.assertEqual(done["content"][0]["text"], notes_tools.NO_BODIES)
        self.assertEqual([note.id for note in server.services.notes.all()], before)

    def test_a_move_over_the_memory_store_is_refused_before_any_form_saying_it_keeps_no_bodies(self) -> None:
        server = self.memory_server()
        notes_tools.install(server)
        before = server.services.notes.all()
        arguments = {"workspaceUri": main.LESSON_WORKSPACE, "noteId": before[0].id, "newPath": "moved.md"}
        done = server.handle(tools_call("notes_move", arguments), PRINCIPAL)["result"]
        self.assertTrue(done["isError"])
        self.assertNotIn("inputRequests", done)
        self.assertEqual(done["content"][0]["text"], notes_tools.NO_BODIES)
        self.assertEqual(server.services.notes.all(), before)

    def test_workspaces_names_only_the_callers_own(self) -> None:
        server = self.memory_server()
        notes_tools.install(server)
        other = server.handle(tools_call("notes_workspaces", {}), "mallory")["result"]
        self.assertEqual(other["structuredContent"], {"workspaces": []})

    def test_arguments_that_are_not_an_object_are_32602_and_an_unknown_one_is_an_error_result(self) -> None:
        server = self.memory_server()
        notes_tools.install(server)
        self.assertEqual(server.handle(tools_call("notes_read", []), PRINCIPAL)["error"]["code"], main.INVALID_PARAMS)  # type: ignore[arg-type]
        done = server.handle(tools_call("notes_read", {"workspaceUri": main.LESSON_WORKSPACE, "noteId": "x", "extra": 1}), PRINCIPAL)["result"]
        self.assertTrue(done["isError"])
        query = "q" * notes_tools.MAX_QUERY_LENGTH
        at = server.handle(tools_call("notes_search", {"workspaceUri": main.LESSON_WORKSPACE, "query": query}), PRINCIPAL)["result"]
        self.assertEqual(at["content"][0]["text"], notes_tools.NO_BODIES)  # the length passed; the store answered
        over = server.handle(tools_call("notes_search", {"workspaceUri": main.LESSON_WORKSPACE, "query": query + "q"}), PRINCIPAL)["result"]
        self.assertIn("must be a string", over["content"][0]["text"])


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
        return [tool["name"] for tool in server.handle(request("tools/list"), PRINCIPAL)["result"]["tools"]]

    def test_the_flag_or_the_config_key_serves_the_note_tools_and_neither_does_not(self) -> None:
        config = {"principals": {PRINCIPAL: {"token": "t-" + KEY.hex(), "workspaces": [main.LESSON_WORKSPACE]}}, "stdioPrincipal": PRINCIPAL}
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
        self.assertIn("-b", small)
        self.assertIn("+c", small)
        lines = notes_tools.MAX_DIFF_LINES - 4  # the two file lines, the hunk line, and the unchanged ""
        self.assertIsNotNone(notes_tools.unified_diff("", "".join(f"{k}\n" for k in range(lines - 1))))
        self.assertIsNone(notes_tools.unified_diff("", "".join(f"{k}\n" for k in range(notes_tools.MAX_DIFF_LINES))))

    def test_frontmatter_is_split_only_when_it_is_closed(self) -> None:
        self.assertEqual(folder_bodies.split_frontmatter(b"---\na: 1\n---\nbody"), (b"---\na: 1\n---\n", b"body"))
        self.assertEqual(folder_bodies.split_frontmatter(b"---\na: 1\nbody"), (b"", b"---\na: 1\nbody"))
        self.assertEqual(folder_bodies.split_frontmatter(b"# x\n---\n"), (b"", b"# x\n---\n"))


if __name__ == "__main__":
    unittest.main()
