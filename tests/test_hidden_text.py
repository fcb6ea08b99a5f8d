"""What a person approves is what they see: characters that render as nothing, or over another, are spelled out.

browser_confirm.HIDDEN_RANGES is the one table of such characters; browser_confirm.visible escapes
them (with every non-printable character) in the update's form and on the confirmation page.
The table is checked here against the Unicode data it cites: the Default_Ignorable_Code_Point
ranges of DerivedCoreProperties.txt are written out below (the standard library has no such
property), and what unicodedata can say (the Overlay combining class, the fillers and
variation selectors by name) is derived from the running Python's data.
"""

from __future__ import annotations

import html
import re
import unicodedata
import unittest

from helpers import support  # noqa: F401  (first: it puts code/ on the import path)
from helpers.support import WORKSPACE  # noqa: E402

import browser_confirm  # noqa: E402
import notes_tools  # noqa: E402
from test_notes_tools_browser import FORM_ONLY, GROCERIES, PageCase  # noqa: E402

# Default_Ignorable_Code_Point, every range in DerivedCoreProperties.txt of the Unicode
# Character Database 14.0.0 (the version of Python 3.11's unicodedata), inclusive.
DEFAULT_IGNORABLE_UCD_VERSION = "14.0.0"
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
OVERLAY = 1  # Canonical_Combining_Class 1: drawn over the character before it

# The attack: 28 UTF-8 bytes that a browser or a host's form draws as nothing at the end of a line.
HIDDEN_28_BYTES = "\U000e0100\U000e01ef\ufe00\u034f\u3164\uffa0\u115f\u17b4\u180b"
LINE = "pay 100 to account 12345"


def derived() -> set[str]:
    """The characters the table must cover, from the data cited above and the running Python's unicodedata."""
    found = {chr(point) for first, last in DEFAULT_IGNORABLE for point in range(first, last + 1)}
    name_of, combining = unicodedata.name, unicodedata.combining
    for ch in map(chr, range(0x110000)):
        name = name_of(ch, "")
        if not name:  # unassigned, private use, a surrogate or a control: combining class 0, no name to match
            continue
        if combining(ch) == OVERLAY:
            found.add(ch)
        elif "VARIATION SELECTOR" in name:
            found.add(ch)
        elif name.endswith("FILLER") and unicodedata.category(ch) in (
            "Lo",
            "Mn",
        ):  # Hangul and Khitan fillers: no glyph
            found.add(ch)
    found.add("\u2800")  # BRAILLE PATTERN BLANK: a printable character whose glyph is empty
    return found


def shown_lines(text: str) -> tuple[str, str]:
    """The `-` and `+` lines of the diff in `text`, without their marks."""
    (old,) = re.findall(r"^-(pay.*)$", text, re.M)
    (new,) = re.findall(r"^\+(pay.*)$", text, re.M)
    return old, new


class TheTable(unittest.TestCase):
    def test_the_table_covers_every_default_ignorable_overlay_filler_and_variation_selector(self) -> None:
        self.assertEqual(len(HIDDEN_28_BYTES.encode("utf-8")), 28)
        wanted = derived()
        missing = sorted(f"U+{ord(ch):04X}" for ch in wanted if ch not in browser_confirm.HIDDEN and ch.isprintable())
        self.assertEqual(
            missing,
            [],
            f"unicodedata {unicodedata.unidata_version}, Default_Ignorable from {DEFAULT_IGNORABLE_UCD_VERSION}",
        )
        shown = notes_tools.visible("".join(sorted(wanted)))
        self.assertTrue(all(ch not in wanted for ch in shown))
        for ch in "\ufe00\ufe0f\U000e0100\U000e01ef\u034f\u115f\u1160\u3164\uffa0\u17b4\u180b\u2800\u0338":
            with self.subTest(point=f"U+{ord(ch):04X}"):
                self.assertEqual(notes_tools.visible("a" + ch), "a" + browser_confirm.escape(ch))

    def test_ordinary_text_in_any_script_is_shown_as_it_is(self) -> None:
        for text in (LINE, "Grüße, café", "日本語のメモ", "e\u0301", "한글", "ʻokina", "emoji 🙂"):
            with self.subTest(text=text):
                self.assertEqual(notes_tools.visible(text), text)


class FormAndPage(PageCase):
    """The one table reaches both places a person approves an update."""

    def setUp(self) -> None:
        super().setUp()
        body = f"{LINE}\n"
        done = self.alice.call("notes_update", self.update_args(body), FORM_ONLY)  # the note to read: LINE
        state = done["result"]["requestState"]
        answer = {notes_tools.UPDATE_KEY: {"action": "accept", "content": {notes_tools.CONFIRM_FIELD: True}}}
        written = self.alice.call(
            "notes_update", self.update_args(body), FORM_ONLY, requestState=state, inputResponses=answer
        )
        self.assertTrue(written["result"]["structuredContent"]["updated"], written)
        self.note["version"] = written["result"]["structuredContent"]["version"]
        self.assertNotEqual(self.text(), GROCERIES)

    def test_a_line_with_28_hidden_bytes_reads_differently_from_the_line_it_replaces_in_the_form(self) -> None:
        first = self.alice.call("notes_update", self.update_args(f"{LINE}{HIDDEN_28_BYTES}\n"), FORM_ONLY)["result"]
        message = first["inputRequests"][notes_tools.UPDATE_KEY]["params"]["message"]
        old, new = shown_lines(message)
        self.assertEqual(old, LINE)
        self.assertNotEqual(new, old)
        self.assertTrue(new.startswith(LINE + "\\U000e0100"), new)
        self.assertTrue(all(ch not in message for ch in HIDDEN_28_BYTES))
        self.assertEqual(self.text(), f"{LINE}\n")

    def test_a_line_with_28_hidden_bytes_reads_differently_from_the_line_it_replaces_on_the_page(self) -> None:
        first = self.first("notes_update", self.update_args(f"{LINE}{HIDDEN_28_BYTES}\n"))
        _, page = self.signed_in(first)
        (change,) = re.findall(r'<pre class="change">(.*?)</pre>', page, re.S)
        old, new = shown_lines(html.unescape(change))
        self.assertEqual(old, LINE)
        self.assertNotEqual(new, old)
        self.assertTrue(new.startswith(LINE + "\\U000e0100"), new)
        self.assertTrue(all(ch not in page for ch in HIDDEN_28_BYTES))
        self.assertEqual(self.text(), f"{LINE}\n")
        self.assertIn(WORKSPACE, html.unescape(page))


if __name__ == "__main__":
    unittest.main()
