"""What a person is shown of a text or a URI: every character they could not see spelled out.

The note tools' forms and the confirmation pages show a note's text, its diff, its title
and where it lives; notes_delete's form (the product's) shows the workspace. A person
approves what they see, so each of those goes through `visible` (and a URI through
`person_uri`) before it is shown. Standard library only.
"""

from __future__ import annotations

import urllib.parse

__all__ = ["person_uri", "visible"]

# Characters a person cannot see, or cannot tell from others, in a form or on the page:
# written out once here, and escaped by `visible` wherever either shows text. The person
# approves what they see, so a character that renders as nothing, or that lays itself
# over the character before it, would let "pay 100 to account 12345" plus hidden bytes
# read exactly as the line it replaces. Python's str.isprintable() already refuses the
# categories Cc, Cf, Cs, Co, Cn, Zs (but U+0020), Zl and Zp; this table adds what it lets
# through. Ranges are inclusive; the data is the Unicode Character Database 14.0.0 (the
# version of Python 3.11's unicodedata), and tests/test_hidden_text.py checks the table
# against that data.
HIDDEN_RANGES: tuple[tuple[int, int, str], ...] = (
    # Default_Ignorable_Code_Point, every range of DerivedCoreProperties.txt (UCD 14.0.0):
    # variation selectors, joiners, fillers, bidi and tag characters, and the reserved rest.
    (0x00AD, 0x00AD, "soft hyphen"),
    (0x034F, 0x034F, "combining grapheme joiner"),
    (0x061C, 0x061C, "Arabic letter mark"),
    (0x115F, 0x1160, "Hangul choseong and jungseong fillers"),
    (0x17B4, 0x17B5, "Khmer inherent vowels"),
    (0x180B, 0x180F, "Mongolian variation selectors and vowel separator"),
    (0x200B, 0x200F, "zero-width space, joiners, direction marks"),
    (0x202A, 0x202E, "bidi embeddings and overrides"),
    (0x2060, 0x206F, "word joiner, invisible operators, bidi isolates"),
    (0x3164, 0x3164, "Hangul filler"),
    (0xFE00, 0xFE0F, "variation selectors"),
    (0xFEFF, 0xFEFF, "zero-width no-break space"),
    (0xFFA0, 0xFFA0, "halfwidth Hangul filler"),
    (0xFFF0, 0xFFF8, "reserved specials"),
    (0x1BCA0, 0x1BCA3, "shorthand format controls"),
    (0x1D173, 0x1D17A, "musical beam and phrase controls"),
    (0xE0000, 0xE0FFF, "tags, variation selectors supplement, reserved"),
    # Canonical_Combining_Class 1 (Overlay): drawn over the character before them, so
    # "1\u0338" reads as a struck-out 1 in one font and as 1 in another.
    (0x0334, 0x0338, "combining overlays"),
    (0x1CD4, 0x1CD4, "Vedic overlay"),
    (0x1CE2, 0x1CE8, "Vedic overlays"),
    (0x20D2, 0x20D3, "combining long and short vertical line overlays"),
    (0x20D8, 0x20DA, "combining ring and clockwise ring overlays"),
    (0x20E5, 0x20E6, "combining reverse solidus and double vertical stroke overlays"),
    (0x20EA, 0x20EB, "combining leftwards arrow and long double solidus overlays"),
    (0x10A39, 0x10A39, "Kharoshthi cauda"),
    (0x16AF0, 0x16AF4, "Bassa Vah combining tones"),
    (0x1BC9E, 0x1BC9E, "Duployan double mark"),
    (0x1D167, 0x1D169, "musical tremolo overlays"),
    # Printable characters whose glyph is blank.
    (0x2800, 0x2800, "Braille pattern blank"),
    (0x16FE4, 0x16FE4, "Khitan small script filler"),
    (0x1D159, 0x1D159, "musical symbol null notehead"),
)
HIDDEN = frozenset(chr(point) for first, last, _ in HIDDEN_RANGES for point in range(first, last + 1))


def escape(ch: str) -> str:
    """One character spelled as the \\u (or \\U) escape a person reads in a form or on the page."""
    return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"


def visible(text: str) -> str:
    """`text` with the backslash doubled and every non-printable or HIDDEN character as a \\u (or \\U) escape."""
    # The backslash is doubled so that "\\u200b" typed in a note cannot pass for an escape.
    if text.isprintable() and "\\" not in text and HIDDEN.isdisjoint(text):
        return text
    return "".join("\\\\" if ch == "\\" else escape(ch) if ch in HIDDEN or not ch.isprintable() else ch for ch in text)


def person_uri(uri: str) -> str:
    """A file:// URI as a person reads it: percent-escapes decoded (`My Notes`, not `My%20Notes`), then made `visible`."""
    # Decoded, a %0A or %E2%80%AE would be a line break or a bidi override in front of a
    # person deciding: `visible` spells every such character as an escape instead.
    return visible(urllib.parse.unquote(uri, errors="replace"))
