"""A move confirmed on this server's page lists the notes whose [[links]] it rewrites, and the approval rewrites them.

Built on the page's test case (tests/test_notes_tools_browser.py): a SQLite store, the page
on, a host without forms.
"""

from __future__ import annotations

from helpers import support  # noqa: F401  first: it puts code/ on the import path
from helpers.support import WORKSPACE  # noqa: E402

import audit  # noqa: E402
import main  # noqa: E402
from test_notes_tools_browser import PageCase  # noqa: E402


class MoveLinksPageTests(PageCase):
    def test_the_page_lists_the_links_the_move_rewrites_and_approval_moves_and_rewrites_them(self) -> None:
        index = self.created(self.alice, WORKSPACE, "Index", "See [[groceries|the list]].\n")
        arguments = self.move_args("archive/food.md")
        first = self.first("notes_move", arguments)
        browser, page = self.signed_in(first)
        self.assertIn("[[groceries|the list]] \u2192 [[food|the list]]", page)
        self.assertIn("rewriteLinks false", page)
        self.press(browser, first, "approve")
        done = self.second("notes_move", arguments, first)["result"]
        self.assertTrue(done["structuredContent"]["moved"], done)
        found = self.store.note_text(index["noteId"], main.parse_file_uri(WORKSPACE))
        self.assertEqual(found[1] if found else None, "See [[food|the list]].\n")
        self.assertEqual([e["outcome"] for e in self.store.audit_entries()][-2:], [audit.MOVED, audit.UPDATED])

    def test_a_link_added_after_the_page_was_opened_refuses_the_move(self) -> None:
        arguments = self.move_args("archive/food.md")
        first = self.first("notes_move", arguments)
        browser, _ = self.signed_in(first)
        self.press(browser, first, "approve")
        index = self.created(self.alice, WORKSPACE, "Index", "See [[groceries]].\n")  # never shown on the page
        done = self.second("notes_move", arguments, first)["result"]
        self.assertTrue(done["isError"], done)
        found = self.store.note_text(index["noteId"], main.parse_file_uri(WORKSPACE))
        self.assertEqual(found[1] if found else None, "See [[groceries]].\n")
        self.assertEqual(
            self.store.note_text(self.note["noteId"], main.parse_file_uri(WORKSPACE))[0].uri, self.note["uri"]
        )
