"""notes_edit confirmed on this server's page: the whole diff of the find-and-replace shown, the shown change written
once.

Built on the page's test case (tests/test_notes_tools_browser.py): a SQLite store, the page
on, a host without forms.
"""

from __future__ import annotations

from typing import Any

from helpers import support  # noqa: F401  first: it puts code/ on the import path
from helpers.support import WORKSPACE  # noqa: E402

import audit  # noqa: E402
import browser_confirm  # noqa: E402
import main  # noqa: E402
import notes_tools  # noqa: E402
from test_notes_tools_browser import GROCERIES, PageCase  # noqa: E402


class EditPageTests(PageCase):
    def edit_args(self, old: str, new: str, **changes: Any) -> dict[str, Any]:
        return {
            "workspaceUri": WORKSPACE,
            "noteId": self.note["noteId"],
            "oldText": old,
            "newText": new,
            "version": self.note["version"],
            **changes,
        }

    def test_the_page_shows_the_edits_whole_diff_and_approval_writes_it_once_audited_as_browser(self) -> None:
        arguments = self.edit_args("eggs", "eggs\u202e\nbread")
        first = self.first("notes_edit", arguments)
        browser, page = self.signed_in(first)
        diff = notes_tools.whole_diff(GROCERIES, GROCERIES.replace("eggs", "eggs\u202e\nbread"))[0]
        self.assertIn("\\u202e", diff)
        self.assertIn(diff, page.replace("&quot;", '"').replace("&#x27;", "'"))
        self.assertEqual(self.press(browser, first, "approve")[0], 200)
        self.assertEqual(self.text(), GROCERIES)  # the page alone writes nothing
        done = self.second("notes_edit", arguments, first)["result"]
        self.assertTrue(done["structuredContent"]["updated"], done)
        self.assertEqual(self.text(), "milk\neggs\u202e\nbread\u200b\n")
        entry = self.last_entry()
        self.assertEqual(
            (entry["outcome"], entry["channel"], entry["approved_by"]), (audit.UPDATED, "browser", "alice")
        )
        self.assertEqual(
            self.second("notes_edit", arguments, first)["error"]["message"],
            browser_confirm.refused_confirmation("notes_edit"),
        )

    def test_a_count_mismatch_opens_no_page_and_says_how_many_matched(self) -> None:
        result = self.alice.call("notes_edit", self.edit_args("m", "M", expectedMatches=3))["result"]
        self.assertTrue(result["isError"])
        self.assertIn("occurs 1 time", result["content"][0]["text"])
        self.assertEqual(self.text(), GROCERIES)
        self.assertNotIn("confirmation page opened for principal 'alice'", self.log)

    def test_a_page_approved_for_one_replacement_does_not_confirm_another(self) -> None:
        arguments = self.edit_args("milk", "oat milk")
        first = self.first("notes_edit", arguments)
        browser, _ = self.signed_in(first)
        self.press(browser, first, "approve")
        other = self.second("notes_edit", dict(arguments, newText="poison"), first)
        self.assertEqual(other["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.text(), GROCERIES)
