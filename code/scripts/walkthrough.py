"""Write outputs/walkthrough.html: the lesson's headings in order, each with its code, the tests proving it, its demo.

    python3 code/scripts/walkthrough.py            # (re)write outputs/walkthrough.html
    python3 code/scripts/walkthrough.py --check    # exit 1 if the committed page differs

Everything on the page is read from the files it describes: the sections are code/main.py's
banners (`# === N. Heading ===`) and run to the next banner; the tests are read from
tests/test_checkpoints.py and tests/test_lesson.py (the lesson's command runs exactly these,
through code/tests/); the demo's lines are `python3 code/main.py`'s own output, split at its
`## ` step titles, each of which names the sections it shows ("(sections 2, 3, 7, 14)").
Only which test proves which heading is written down here (PROOFS). The page is plain HTML
and CSS, with no script and nothing loaded from elsewhere.
"""

from __future__ import annotations

import argparse
import ast
import html
import os
import re
import sys
from typing import NamedTuple

CODE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(CODE)
if CODE not in sys.path:
    sys.path.insert(0, CODE)

import main  # noqa: E402

PAGE = os.path.join(ROOT, "outputs", "walkthrough.html")
# What `cd code && python3 -m unittest discover tests` runs.
LESSON_TESTS = ("tests/test_checkpoints.py", "tests/test_lesson.py")

# Which tests prove each heading: checkpoints first, then main.py's own tests. A test
# named here that no longer exists stops the script; tests/test_walkthrough.py checks
# by tracing that each one runs lines of the section it is listed under.
PROOFS: dict[int, tuple[str, ...]] = {
    1: (
        "test_06_a_changed_title_or_workspace_cannot_reuse_the_confirmation_state",
        "test_a_workspace_uri_holding_a_nul_or_a_lone_surrogate_is_invalid_params_and_reaches_no_store",
    ),
    2: (
        "test_05_prefix_and_encoded_traversal_fail_containment_like_every_other_variant",
        "test_a_workspace_not_granted_is_an_error_result_naming_only_the_callers_own",
    ),
    3: ("test_03_first_call_returns_input_required_with_a_titled_single_select_and_confirm",),
    4: (
        "test_09_form_is_offered_only_to_clients_declaring_form_elicitation",
        "test_10_unsupported_version_gets_32022_and_missing_or_non_string_version_gets_32602",
    ),
    5: (
        "test_03_first_call_returns_input_required_with_a_titled_single_select_and_confirm",
        "test_the_form_says_what_deleting_does_in_this_store",
    ),
    6: ("test_07_decline_leaves_notes_unchanged_and_is_terminal_for_the_state",),
    7: (
        "test_a_state_verifies_only_with_its_key_and_unaltered",
        "test_an_expired_state_is_refused_and_deletes_nothing",
    ),
    8: (
        "test_08_two_servers_sharing_stores_cannot_both_execute_one_confirmation",
        "test_a_nonce_is_claimed_once_and_forgotten_only_after_its_expiry",
    ),
    9: (
        "test_04_retry_with_fresh_id_and_accept_deletes_only_the_chosen_note",
        "test_a_note_edited_after_the_form_is_not_deleted_and_the_confirmation_ends",
    ),
    10: ("test_04_retry_with_fresh_id_and_accept_deletes_only_the_chosen_note",),
    11: (
        "test_11_id_less_messages_get_no_response_and_an_id_less_call_never_deletes",
        "test_a_malformed_envelope_is_32600_and_an_unknown_method_32601",
    ),
    12: ("test_01_discover_reports_versions_tools_capability_cache_hints_and_identity_in_meta",),
    13: ("test_02_tools_list_describes_notes_delete_deterministically_and_resists_caller_mutation",),
    14: ("test_03_first_call_returns_input_required_with_a_titled_single_select_and_confirm",),
    15: ("test_the_lesson_server_reports_the_tools_capability_and_its_one_tool",),
}

BANNER = re.compile(r"^# =+ (\d+)\. (.+?) =+$")
STEP_SECTIONS = re.compile(r"\(sections? ([\d, ]+)")
STATE = re.compile(r"v1\.[0-9a-f]{8}\.…\(\d+ chars, signed\)")  # random per run: the key, the nonce, the time


class Section(NamedTuple):
    """One lesson heading in main.py: its number, title and lines (first, last)."""

    number: int
    title: str
    first: int
    last: int


class Proof(NamedTuple):
    """One lesson test: where it is and its source."""

    name: str
    path: str
    line: int
    source: str


def sections(lines: list[str]) -> list[Section]:
    """main.py's banners, each running to the line before the next banner (the last to the end of the file)."""
    starts = [(k, match) for k, line in enumerate(lines, start=1) if (match := BANNER.match(line))]
    found = []
    for index, (start, match) in enumerate(starts):
        end = starts[index + 1][0] - 1 if index + 1 < len(starts) else len(lines)
        found.append(Section(int(match.group(1)), match.group(2), start, end))
    return found


def lesson_tests() -> dict[str, Proof]:
    """Every test method in the lesson's test files, by name."""
    found: dict[str, Proof] = {}
    for path in LESSON_TESTS:
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            text = handle.read()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                found[node.name] = Proof(node.name, path, node.lineno, ast.get_source_segment(text, node) or "")
    return found


def demo_steps() -> list[tuple[set[int], list[tuple[int, str]]]]:
    """The demo's output in steps: the sections each step names, and its (line number, text) pairs."""
    out: list[str] = []
    main.demo(out=lambda text: out.extend(text.split("\n")))
    steps: list[tuple[set[int], list[tuple[int, str]]]] = [({15}, [])]  # the opening lines are the demo's own
    for number, line in enumerate(out, start=1):
        line = STATE.sub("v1.<key id>.…(signed; differs each run)", line)
        if line.startswith("## "):
            cited = STEP_SECTIONS.search(line)
            steps.append(({int(n) for n in cited.group(1).replace(",", " ").split()} if cited else set(), []))
        if line or steps[-1][1]:
            steps[-1][1].append((number, line))
    for _, step in steps:
        while step and not step[-1][1]:  # the blank line before the next step's title
            step.pop()
    return steps


def code_block(lines: list[str], section: Section) -> str:
    """The section's lines, each numbered and linkable (#L<number>)."""
    rows = []
    for number in range(section.first, section.last + 1):
        rows.append(
            f'<a class="ln" id="L{number}" href="#L{number}">{number}</a>{html.escape(lines[number - 1]) or " "}'
        )
    return '<pre class="code">' + "\n".join(rows) + "</pre>"


def render() -> str:
    """The whole page."""
    with open(os.path.join(CODE, "main.py"), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    found = sections(lines)
    tests = lesson_tests()
    missing = sorted({name for names in PROOFS.values() for name in names} - tests.keys())
    if missing or sorted(PROOFS) != [s.number for s in found]:
        raise SystemExit(
            f"walkthrough: PROOFS names tests that do not exist ({missing}) or other headings than main.py's"
        )
    steps = demo_steps()
    shown_tests: dict[str, int] = {}
    parts = [HEAD, '<nav aria-label="Headings"><ol>']
    parts += [
        f'<li><a href="#section-{s.number}">{html.escape(s.title)}</a> '
        f'<span class="where">lines {s.first}–{s.last}</span></li>'
        for s in found
    ]
    parts.append("</ol></nav>")
    opening = Section(0, "", 1, found[0].first - 1)
    parts.append(
        f'<details class="opening"><summary>Before the headings: the module\'s summary, its names and limits, '
        f"and the two kinds of error (lines 1–{opening.last})</summary>{code_block(lines, opening)}</details>"
    )
    for s in found:
        parts.append(f'<section id="section-{s.number}">')
        parts.append(f'<h2><a href="#L{s.first}">{s.number}. {html.escape(s.title)}</a></h2>')
        parts.append(
            f'<p class="where">code/main.py lines {s.first}–{s.last} (<a href="../code/main.py">the file</a>)</p>'
        )
        parts.append(code_block(lines, s))
        parts.append('<h3>The test that proves it</h3><ul class="proofs">')
        for name in PROOFS[s.number]:
            proof = tests[name]
            where = f'<span class="where"><a href="../{proof.path}">{proof.path}</a> line {proof.line}</span>'
            if name in shown_tests:  # its source is on the page once, under the first heading it proves
                parts.append(
                    f'<li><a href="#{name}"><code>{html.escape(name)}</code></a> {where} '
                    f"(shown under heading {shown_tests[name]})</li>"
                )
                continue
            shown_tests[name] = s.number
            parts.append(
                f'<li><details id="{name}"><summary><code>{html.escape(name)}</code> {where}</summary>'
                f'<pre class="test">{html.escape(proof.source)}</pre></details></li>'
            )
        parts.append("</ul>")
        shown = [step for cited, step in steps if s.number in cited]
        parts.append("<h3>In the demo</h3>")
        if shown:
            for step in shown:
                rows = [f'<span class="ln">{n}</span>{html.escape(text) or " "}' for n, text in step]
                parts.append('<pre class="demo">' + "\n".join(rows) + "</pre>")
        else:
            parts.append("<p>No demo step shows this heading on its own.</p>")
        parts.append("</section>")
    parts.append(FOOT)
    return "\n".join(parts) + "\n"


HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>The lesson, walked through: code/main.py beside its tests and demo</title>
<style>
body { font: 16px/1.5 system-ui, sans-serif; color: #1b1b1b; background: #fdfdfb;
       margin: 0 auto; max-width: 72rem; padding: 1rem; }
h1 { font-size: 1.6rem; margin: 0.5rem 0; }
h2 { font-size: 1.25rem; margin: 2.5rem 0 0.25rem; border-top: 2px solid #d8d4c8; padding-top: 1rem; }
h2 a { color: inherit; text-decoration: none; }
h2 a:hover, h2 a:focus { text-decoration: underline; }
h3 { font-size: 1rem; margin: 1rem 0 0.25rem; }
a { color: #0b57a4; }
.where { color: #5d5a52; font-size: 0.875rem; }
pre { font: 13px/1.45 ui-monospace, "DejaVu Sans Mono", monospace; overflow-x: auto; padding: 0.5rem; margin: 0.25rem 0;
      border-radius: 4px; }
pre.code { background: #f4f1e8; border: 1px solid #e3dfd2; }
pre.demo { background: #1f2328; color: #e6edf3; }
pre.test { background: #eef3f8; border: 1px solid #d5e0ec; }
.ln { display: inline-block; width: 3.5em; padding-right: 0.75em; text-align: right; color: #8a857a; user-select: none;
      text-decoration: none; }
pre.demo .ln { color: #7d8590; }
a.ln:target, section:target > h2 { background: #fff3b0; }
nav ol { padding-left: 1.5rem; }
ul.proofs { list-style: none; padding-left: 0; }
summary { cursor: pointer; }
</style>
</head>
<body>
<h1>The lesson, walked through</h1>
<p>Each heading of the lesson, in the lesson's order: the part of <a href="../code/main.py">code/main.py</a>
that builds it (every line number links to that line), the test that proves it (open it to read it), and
what <code>python3 code/main.py</code> prints for it. Run the tests with
<code>(cd code &amp;&amp; python3 -m unittest discover tests -v)</code>. This page is written by
<code>python3 code/scripts/walkthrough.py</code> from those files; the demo's signed state differs on
every run and is shown without its value.</p>"""

FOOT = "</body>\n</html>"


def main_cli(argv: list[str] | None = None) -> int:
    """Write the page, or with --check report whether the committed one is current."""
    parser = argparse.ArgumentParser(
        description="Write outputs/walkthrough.html from code/main.py, its tests and its demo."
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if outputs/walkthrough.html differs from a fresh one"
    )
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        try:
            with open(PAGE, encoding="utf-8") as handle:
                current = handle.read() == page
        except FileNotFoundError:
            current = False
        print(
            "outputs/walkthrough.html is current"
            if current
            else "outputs/walkthrough.html is out of date: run code/scripts/walkthrough.py"
        )
        return 0 if current else 1
    with open(PAGE, "w", encoding="utf-8") as handle:
        handle.write(page)
    print(f"wrote {os.path.relpath(PAGE, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main_cli())
