"""A move the store refuses opens no confirmation page: the person is never asked to approve what cannot happen."""

from __future__ import annotations

import json
import unittest

from helpers import support  # noqa: F401  (first: it puts code/ on the import path)
from helpers.support import WORKSPACE  # noqa: E402

import confirm_pages  # noqa: E402
import main  # noqa: E402
import note_bodies  # noqa: E402
from test_notes_tools_browser import GROCERIES, PageCase  # noqa: E402


class RefusedBeforeThePage(PageCase):
    def pages_opened(self) -> int:
        return self.store.read_with(lambda c: c.execute("SELECT COUNT(*) FROM browser_confirmations").fetchone()[0])

    def test_a_move_onto_an_existing_note_opens_no_page_and_changes_nothing(self) -> None:
        other = self.created(self.alice, WORKSPACE, "Taken", "keep\n")
        place = self.store.note_text(other["noteId"], main.parse_file_uri(WORKSPACE))[0].uri.rsplit("/", 1)[1]
        result = self.alice.call("notes_move", self.move_args(place))["result"]
        self.assertTrue(result["isError"], result)
        self.assertEqual(result["content"][0]["text"], note_bodies.TAKEN)
        self.assertNotIn(confirm_pages.PATH_PREFIX, json.dumps(result))
        self.assertEqual(self.pages_opened(), 0)
        self.assertEqual(self.text(), GROCERIES)

    def test_a_move_to_a_uri_no_tool_reaches_opens_no_page(self) -> None:
        result = self.alice.call("notes_move", self.move_args("\u00e9" * 340 + ".md"))[
            "result"
        ]  # %C3%A9 x 340: past 2,048
        self.assertEqual(result["content"][0]["text"], note_bodies.UNREACHABLE)
        self.assertEqual(self.pages_opened(), 0)
        self.assertEqual(self.text(), GROCERIES)


if __name__ == "__main__":
    unittest.main()
