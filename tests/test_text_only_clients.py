"""What clients that fill every argument, or show their model only text, need of the results and their words.

Some hosts send every schema property (an empty `confirmation` on the first call), some give
the model only the text content, some only the structured content; a person reads the forms
and pages. In process, over the SQLite store, with the confirmation page on.
"""

from __future__ import annotations

import json
import unittest
from typing import Any

from helpers.support import WORKSPACE  # noqa: E402

import browser_confirm  # noqa: E402
import main  # noqa: E402
import notes_tools  # noqa: E402
from test_notes_tools_browser import FORM_ONLY, GROCERIES, PageCase  # noqa: E402


def model_text(result: dict[str, Any]) -> str:
    """What a model that is given only the text content reads: every text block, in order."""
    return "\n".join(block["text"] for block in result["content"] if block["type"] == "text")


class EmptyConfirmationTests(PageCase):
    """An empty `confirmation` is the first call, for notes_delete and the note tools alike."""

    def test_an_empty_confirmation_on_notes_update_is_a_first_call_and_returns_a_link(self) -> None:
        result = self.alice.call("notes_update", {**self.update_args("bread\n"), "confirmation": ""})["result"]
        self.assertFalse(result["isError"], result)
        self.assertEqual(result["structuredContent"]["status"], browser_confirm.ISSUED)
        self.assertEqual(self.text(), GROCERIES)  # nothing written

    def test_an_empty_confirmation_on_notes_delete_is_a_first_call_and_deletes_nothing(self) -> None:
        before = len(self.store.candidates(main.parse_file_uri(WORKSPACE), ""))
        result = self.alice.call(main.TOOL_NAME, {"workspaceUri": WORKSPACE, "title": "Groceries", "confirmation": ""})[
            "result"
        ]
        self.assertEqual((result["isError"], result["structuredContent"]["reason"]), (False, browser_confirm.AWAITING))
        self.assertEqual(len(self.store.candidates(main.parse_file_uri(WORKSPACE), "")), before)

    def test_an_empty_confirmation_with_a_form_host_gets_the_form(self) -> None:
        result = self.alice.call("notes_update", {**self.update_args("bread\n"), "confirmation": ""}, FORM_ONLY)[
            "result"
        ]
        self.assertEqual(result["resultType"], "input_required")

    def test_the_schema_says_empty_means_absent(self) -> None:
        for tool in (main.TOOL_NAME, "notes_update", "notes_move"):
            with self.subTest(tool=tool):
                described = self.server.tools[tool].descriptor["inputSchema"]["properties"]["confirmation"][
                    "description"
                ]
                self.assertIn("empty string", described)
                self.assertIn("first call", described)


class JsonTextTests(PageCase):
    """Every structured result also as its JSON, in the last text block; a pending result says so in its structure."""

    def test_every_structured_result_ends_with_its_json_and_keeps_its_own_text_first(self) -> None:
        results = [
            self.alice.call("notes_workspaces", {})["result"],
            self.alice.call("notes_search", {"workspaceUri": WORKSPACE, "query": "milk"})["result"],
            self.alice.call("notes_read", {"workspaceUri": WORKSPACE, "noteId": self.note["noteId"]})["result"],
            self.first("notes_update", self.update_args("bread\n")),
        ]
        for result in results:
            with self.subTest(result=result["structuredContent"]):
                self.assertEqual(len(result["content"]), 2)
                self.assertEqual(json.loads(result["content"][-1]["text"]), result["structuredContent"])

    def test_an_error_result_gets_no_json_block(self) -> None:
        result = self.alice.call("notes_read", {"workspaceUri": WORKSPACE, "noteId": "no-such-note"})["result"]
        self.assertTrue(result["isError"])
        self.assertEqual(len(result["content"]), 1)

    def test_a_text_only_model_reads_the_version_and_id_notes_update_needs(self) -> None:
        read = self.alice.call("notes_read", {"workspaceUri": WORKSPACE, "noteId": self.note["noteId"]})["result"]
        seen = model_text(read)
        fields = json.loads(seen.rsplit("\n", 1)[1])
        self.assertEqual((fields["noteId"], fields["version"]), (self.note["noteId"], self.note["version"]))

    def test_a_text_only_model_reads_the_link_and_token_and_the_pending_status(self) -> None:
        first = self.first("notes_update", self.update_args("bread\n"))
        pending = self.second("notes_update", self.update_args("bread\n"), first)["result"]
        for result, status in ((first, browser_confirm.ISSUED), (pending, browser_confirm.STILL_PENDING)):
            fields = json.loads(model_text(result).rsplit("\n", 1)[1])
            self.assertEqual(fields["status"], status)
            self.assertEqual(
                (fields["url"], fields["confirmation"]),
                (first["structuredContent"]["url"], first["structuredContent"]["confirmation"]),
            )
        self.assertNotEqual(pending["structuredContent"], first["structuredContent"])
        self.assertEqual(self.text(), GROCERIES)

    def test_notes_delete_output_schema_names_the_status(self) -> None:
        schema = self.server.tools[main.TOOL_NAME].descriptor["outputSchema"]["properties"]
        self.assertEqual(schema["status"]["enum"], [browser_confirm.ISSUED, browser_confirm.STILL_PENDING])


class WordsTests(PageCase):
    """A refused token names `confirmation` and the next step; people read decoded URIs; snippets and diffs say what
    is."""

    def test_a_used_expired_or_foreign_confirmation_is_one_message_naming_the_argument_and_the_next_step(self) -> None:
        arguments = self.update_args("bread\n")
        first = self.first("notes_update", arguments)
        token = first["structuredContent"]["confirmation"]
        refusals = [
            self.alice.call(
                "notes_update", {**arguments, "confirmation": token[:-2] + ("AA" if not token.endswith("AA") else "BB")}
            ),
            self.bob.call("notes_update", {**arguments, "workspaceUri": WORKSPACE, "confirmation": token}),
        ]
        self.clock.now += main.DEFAULT_STATE_TTL_SECONDS
        refusals.append(self.second("notes_update", arguments, first))
        messages = set()
        for refusal in refusals:
            if "error" in refusal:
                self.assertEqual(refusal["error"]["code"], main.INVALID_PARAMS)
                messages.add(refusal["error"]["message"])
        self.assertEqual(messages, {browser_confirm.refused_confirmation("notes_update")})
        (message,) = messages
        self.assertIn("confirmation is not valid", message)
        self.assertIn("Call notes_update again without confirmation", message)
        self.assertNotIn("requestState", message)
        self.assertEqual(self.text(), GROCERIES)

    def test_the_form_and_the_page_show_the_workspace_decoded_with_controls_escaped(self) -> None:
        self.assertEqual(notes_tools.person_uri("file:///Users/alice/My%20Notes"), "file:///Users/alice/My Notes")
        self.assertEqual(notes_tools.person_uri("file:///a/%E2%80%AEtxt.md%0A"), "file:///a/\\u202etxt.md\\u000a")
        form = self.alice.call("notes_move", self.move_args("My Archive/g.md"), FORM_ONLY)["result"]
        message = form["inputRequests"][notes_tools.MOVE_KEY]["params"]["message"]
        self.assertIn("/My Archive/g.md", message)
        self.assertNotIn("%20", message)

    def test_a_search_snippet_leaves_out_the_heading_that_repeats_the_title(self) -> None:
        self.created(self.alice, WORKSPACE, "Trip plan", "# Trip plan\n\nPack the tent and the stove.\n")
        found = self.alice.call("notes_search", {"workspaceUri": WORKSPACE, "query": "tent"})["result"][
            "structuredContent"
        ]["results"]
        self.assertEqual([r["snippet"] for r in found], ["Pack the tent and the stove."])
        self.assertEqual(
            notes_tools.snippet("# Other heading\nbody", "body", "Trip plan"), "# Other heading body"
        )  # not the title: kept

    def test_the_diff_header_counts_the_lines_a_note_has(self) -> None:
        shown, _ = notes_tools.whole_diff("a\nb\nc\nd\n", "a\nb\nC\nd\n")
        self.assertEqual(shown.split("\n")[2], "@@ -1,4 +1,4 @@")
        self.assertNotIn(notes_tools.NO_NEWLINE, shown)
        shown, _ = notes_tools.whole_diff("a\nb", "a\nb\n")  # only the last newline changes: the diff says so
        self.assertEqual(shown.split("\n")[2:], ["@@ -1,2 +1,2 @@", " a", "-b", notes_tools.NO_NEWLINE, "+b"])


if __name__ == "__main__":
    unittest.main()
