"""The documentation: host configurations that really start, links that resolve, a short front page."""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import io
import json
import operator
import os
import pathlib
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import tomllib
import unittest
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

from helpers import support

ROOT = support.ROOT
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
SERVING = os.path.join(DOCS, "serving.md")
MAX_README_LINES = 150
GUARD = 60.0  # seconds; only a failure guard, never what a test asserts

# The placeholders docs/serving.md asks the reader to replace.
CHECKOUT_PLACEHOLDER = "/ABSOLUTE/PATH/TO/CHECKOUT"
NOTES_PLACEHOLDER = "/ABSOLUTE/PATH/TO/Notes"
SECRET_PLACEHOLDER = "PASTE_64_HEX_DIGITS_HERE"
HOST_KEYS = ("mcpServers", "servers")
INSTALLED_COMMAND = "notes-mcp"  # the command `pip install .` puts on PATH (tests/test_package.py)

PROTOCOL_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}

_JSON_BLOCK_RE = re.compile(r"^```json\n(.*?)^```", re.DOTALL | re.MULTILINE)
_FENCE_RE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_INLINE_CODE_RE = re.compile(r"`[^`\n]*`")
_LINK_RE = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_HEADING_RE = re.compile(r"^#{1,6} +(.+?) *#*$", re.MULTILINE)
_PYTHON_BLOCK_RE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def read(path: str) -> str:
    """A file's text."""
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def json_blocks(text: str) -> list[str]:
    """The bodies of every ```json fenced block, in order."""
    return _JSON_BLOCK_RE.findall(text)


def link_targets(text: str) -> list[str]:
    """Every Markdown link and image target outside code (fenced blocks and inline code)."""
    prose = _INLINE_CODE_RE.sub("", _FENCE_RE.sub("", text))
    return _LINK_RE.findall(prose)


def broken_links(page: str, text: str) -> list[str]:
    """Targets in `text` (a page at path `page`) that leave the repository or name no file."""
    broken = []
    for target in link_targets(text):
        if target.startswith("#"):
            continue  # an anchor on the same page
        if target.startswith("../") or re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
            broken.append(target)  # outside the repository (or an absolute URL)
            continue
        path = os.path.normpath(os.path.join(os.path.dirname(page), target.split("#")[0]))
        if not path.startswith(ROOT + os.sep) or not os.path.exists(path):
            broken.append(target)
    return broken


def anchors(text: str) -> set[str]:
    """The anchors a Markdown renderer gives the page's headings: lower case, punctuation dropped, spaces to `-`,
    repeats numbered."""
    found: set[str] = set()
    for heading in _HEADING_RE.findall(_FENCE_RE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        candidate, count = slug, 0
        while candidate in found:
            count += 1
            candidate = f"{slug}-{count}"
        found.add(candidate)
    return found


def dead_anchors(page: str, text: str) -> list[str]:
    """Link targets in `text` (a page at path `page`) whose `#anchor` names no heading of the page they point at."""
    dead = []
    own: set[str] | None = None  # this page's anchors, found at its first own-page link
    for target in link_targets(text):
        path, _, anchor = target.partition("#")
        if not anchor or re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        linked = page if not path else os.path.normpath(os.path.join(os.path.dirname(page), path))
        if not (linked.endswith(".md") and os.path.exists(linked)):
            continue
        if path:
            known: AbstractSet[str] = page_anchors(linked)
        else:
            own = known = anchors(text) if own is None else own
        if anchor not in known:
            dead.append(target)
    return dead


@functools.cache
def page_anchors(path: str) -> frozenset[str]:
    """The anchors of the page at `path`, found once per run: many links point at the same few pages."""
    return frozenset(anchors(read(path)))


def python_blocks(text: str) -> list[str]:
    """The bodies of every ```python block: complete programs (a sketch is shown some other way)."""
    return _PYTHON_BLOCK_RE.findall(text)


# A fenced block, and the comment before it that keeps it from the snippet runners:
# `<!-- not run as a snippet: REASON -->` on the line just above the fence.
NOT_RUN = "<!-- not run as a snippet: "
_SNIPPET_RE = re.compile(
    r"^(?:<!-- not run as a snippet: (?P<reason>[^\n]*?) -->\n)?```(?P<lang>[^\n`]*)\n(?P<body>.*?)^```",
    re.DOTALL | re.MULTILINE,
)


class Snippet(NamedTuple):
    """One fenced block of a page: its language tag, text, line of its fence, and why the runners skip it (None: they
    run it)."""

    lang: str
    body: str
    line: int
    not_run: str | None


def snippets(text: str) -> list[Snippet]:
    """Every fenced block of `text`, in order, with its not-run reason where the page gives one."""
    found = []
    for match in _SNIPPET_RE.finditer(text):
        fence = match.start("lang") - 3
        found.append(
            Snippet(
                match.group("lang").strip(), match.group("body"), text.count("\n", 0, fence) + 1, match.group("reason")
            )
        )
    return found


def documented_pages() -> list[str]:
    """README.md and every docs/*.md."""
    return [README] + sorted(str(path) for path in pathlib.Path(DOCS).glob("*.md"))


# ------------------------------------------------------------------ Mermaid diagrams

# The first word of a Mermaid diagram names its type; these are the types Mermaid draws.
MERMAID_TYPES = frozenset({
    "sequenceDiagram", "flowchart", "graph", "classDiagram", "stateDiagram", "stateDiagram-v2", "erDiagram",
    "journey", "gantt", "pie", "quadrantChart", "requirementDiagram", "gitGraph", "mindmap", "timeline",
    "sankey-beta", "xychart-beta", "block-beta", "packet-beta", "architecture-beta",
})  # fmt: skip
SEQUENCE_OPENERS = frozenset({"loop", "alt", "opt", "par", "critical", "break", "rect", "box"})  # each closed by `end`
SEQUENCE_MIDDLES = frozenset({"else", "and", "option"})  # only inside an open block
# Words a flowchart reads as syntax: a node named so breaks the whole diagram.
FLOWCHART_KEYWORDS = frozenset(
    {
        "end",
        "call",
        "click",
        "style",
        "class",
        "classDef",
        "linkStyle",
        "subgraph",
        "graph",
        "flowchart",
        "direction",
        "default",
    }
)
_MERMAID_BLOCK_RE = re.compile(r"^```mermaid\n(.*?)^```", re.DOTALL | re.MULTILINE)
_SEQ_DECLARE_RE = re.compile(r"^(?:participant|actor)\s+([^\s;]+)")
_SEQ_MESSAGE_RE = re.compile(r"^([^:]+?)\s*(?:<<)?(?:-->>|->>|-->|->|--x|-x|--\)|-\))[+-]?\s*([^:]+?)\s*:")
_SEQ_NOTE_RE = re.compile(r"^note\s+(?:over|left of|right of)\s+([^:]+):", re.IGNORECASE)
_FLOW_EDGE_RE = re.compile(r"\s*(?:<?-->|<?---|<?-\.->|-\.-|<?==>|===|--[ox]|~~~)\s*(?:\|[^|]*\|)?\s*")
_FLOW_NODE_RE = re.compile(r"^([A-Za-z_][\w-]*)")
_QUOTED_RE = re.compile(r'"[^"]*"')


def mermaid_blocks(text: str) -> list[str]:
    """The bodies of every ```mermaid fenced block, in order."""
    return _MERMAID_BLOCK_RE.findall(text)


def mermaid_problems(block: str) -> list[str]:
    """What keeps a Mermaid block from drawing: an unknown type, unbalanced blocks or brackets, undeclared actors,
    keyword ids."""
    lines = [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("%%")]
    if not lines:
        return ["an empty diagram"]
    kind = lines[0].split()[0]
    if kind not in MERMAID_TYPES:
        return [f"{kind!r} is not a Mermaid diagram type"]
    problems: list[str] = []
    for line in lines[1:]:
        bare = _QUOTED_RE.sub('""', line)
        if bare.count('"') % 2:
            problems.append(f"an unclosed quote: {line}")
        for opening, closing in ("[]", "()", "{}"):
            if bare.count(opening) != bare.count(closing):
                problems.append(f"unbalanced {opening}{closing}: {line}")
    if kind == "sequenceDiagram":
        problems += sequence_problems(lines[1:])
    elif kind in ("flowchart", "graph"):
        problems += flowchart_problems(lines[1:])
    return problems


def sequence_problems(lines: list[str]) -> list[str]:
    """A sequence diagram's blocks open and close in pairs, and every actor is declared before it is used."""
    problems: list[str] = []
    declared: set[str] = set()
    depth = 0
    for line in lines:
        word = line.split()[0]
        if declared_name := _SEQ_DECLARE_RE.match(line):
            declared.add(declared_name.group(1))
        elif word in SEQUENCE_OPENERS:
            depth += 1
        elif word in SEQUENCE_MIDDLES:
            if depth == 0:
                problems.append(f"{word!r} outside a block: {line}")
        elif word == "end":
            depth -= 1
            if depth < 0:
                problems.append("an `end` closing nothing")
                depth = 0
        elif note := _SEQ_NOTE_RE.match(line):
            problems += [
                f"{name!r} used before it is declared"
                for name in map(str.strip, note.group(1).split(","))
                if name not in declared
            ]
        elif message := _SEQ_MESSAGE_RE.match(line):
            problems += [f"{name!r} used before it is declared" for name in message.groups() if name not in declared]
            if ";" in _QUOTED_RE.sub('""', line):
                problems.append(f"a `;` ends the statement, so the rest of the message is read as a new one: {line}")
        elif word not in ("autonumber", "activate", "deactivate", "title"):
            problems.append(f"neither a declaration, a message nor a block: {line}")
    if depth:
        problems.append(f"{depth} block(s) without `end`")
    return problems


def flowchart_problems(lines: list[str]) -> list[str]:
    """A flowchart's subgraphs open and close in pairs, and no node is named with a word Mermaid reads as syntax."""
    problems: list[str] = []
    depth = 0
    for line in lines:
        word = line.split()[0]
        if word == "subgraph":
            depth += 1
            continue
        if line == "end":
            depth -= 1
            if depth < 0:
                problems.append("an `end` closing no subgraph")
                depth = 0
            continue
        if word in ("direction", "style", "classDef", "class", "linkStyle", "click"):
            continue
        for piece in _FLOW_EDGE_RE.split(_QUOTED_RE.sub('""', line)):
            for part in piece.split("&"):
                node = _FLOW_NODE_RE.match(part.strip())
                if node and node.group(1) in FLOWCHART_KEYWORDS:
                    problems.append(f"a node named {node.group(1)!r}, a Mermaid keyword: {line}")
    if depth:
        problems.append(f"{depth} subgraph(s) without `end`")
    return problems


# ------------------------------------------------------------------ figures the code gives


def code_constants() -> dict[str, dict[str, float]]:
    """Every module-level numeric constant (NAME = literal arithmetic) of code/ and code/scripts/: name -> module ->
    value."""
    found: dict[str, dict[str, float]] = {}
    for path in sorted(pathlib.Path(support.CODE).glob("*.py")) + sorted(pathlib.Path(support.SCRIPTS).rglob("*.py")):
        known: dict[str, Any] = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                name, value = node.target.id, node.value
            else:
                continue
            if not re.fullmatch(r"[A-Z][A-Z0-9_]+", name):
                continue
            number = arithmetic(value, known)
            if number is not None:
                known[name] = number
                found.setdefault(name, {})[path.stem] = number
    return found


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def arithmetic(node: ast.expr, known: dict[str, Any]) -> float | None:
    """The value of a literal number, an earlier constant, or +, -, *, /, ** over them; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = arithmetic(node.operand, known)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = arithmetic(node.left, known), arithmetic(node.right, known)
        return None if left is None or right is None else _OPERATORS[type(node.op)](left, right)
    return None


# "`NAME` (5000 ms", "`module.NAME` = 64", and table rows "| `NAME` | 16 KiB |": a value quoted beside its constant.
_NUMBER = r"(?>(\d[\d,]*(?:\.\d+)?)(?: ?(ms|s|KiB|MiB)\b)?)"  # atomic: "16 KiB + 4" is not "16"
_QUOTED_LIMIT_RE = re.compile(
    r"`(?:([a-z_]+)\.)?([A-Z][A-Z0-9_]{2,})` *(?:\(|=) *" + _NUMBER + r"(?![\d.]|\*| \*|\.\.| ?\+)"
)
_TABLE_LIMIT_RE = re.compile(r"^\| `()([A-Z][A-Z0-9_]{2,})` \| " + _NUMBER + r" \|", re.MULTILINE)
UNIT_SCALE = {"KiB": 1024, "MiB": 1024 * 1024}


def wrong_limits(text: str, constants: dict[str, dict[str, float]]) -> list[str]:
    """Every value quoted beside a constant's name that is not that constant's value (in the unit written)."""
    wrong = []
    for found in [*_QUOTED_LIMIT_RE.finditer(text), *_TABLE_LIMIT_RE.finditer(text)]:
        module, name, number, unit = found.groups()
        quoted = float(number.replace(",", "")) * UNIT_SCALE.get(unit or "", 1)
        if unit == "ms" and not name.endswith("_MS"):
            quoted /= 1000  # a time in seconds, written in ms
        elif unit == "s" and name.endswith("_MS"):
            quoted *= 1000  # a time in ms, written in seconds
        values = {where: value for where, value in constants.get(name, {}).items() if not module or where == module}
        if not any(abs(value - quoted) < 1e-9 for value in values.values()):
            wrong.append(f"{found.group(0)!r}: the code has {values or 'no such constant'}")
    return wrong


_TEST_COUNT_RE = re.compile(r"`python3 -m unittest tests\.(test_\w+)(?: -v)?` runs (\d[\d,]*) tests")


def quoted_test_counts(text: str) -> list[tuple[str, int]]:
    """(module, count) for every "`python3 -m unittest tests.MODULE` runs N tests" in `text`."""
    return [(module, int(count.replace(",", ""))) for module, count in _TEST_COUNT_RE.findall(text)]


def test_count(module: str) -> int:
    """How many tests `python3 -m unittest tests.MODULE` runs (skipped ones included)."""

    def count(suite: unittest.TestSuite) -> int:
        return sum(count(test) if isinstance(test, unittest.TestSuite) else 1 for test in suite)

    return count(unittest.defaultTestLoader.loadTestsFromName(module))


_CONTENTS_RE = re.compile(r"^Contents\n\n((?:[ ]*- .*\n)+)", re.MULTILINE)


def missing_from_contents(text: str) -> list[str]:
    """The `##` headings of a page with a Contents list that the list does not link."""
    prose = _FENCE_RE.sub("", text)
    contents = _CONTENTS_RE.search(prose)
    if contents is None:
        return []
    listed = set(re.findall(r"\]\(#([^)]+)\)", contents.group(1)))
    return [
        heading for heading in re.findall(r"^## +(.+?) *$", prose, re.MULTILINE) if anchors(f"# {heading}") - listed
    ]


class HostConfigurationTests(unittest.TestCase):
    """Every configuration in docs/serving.md, started exactly as a host would start it."""

    def setUp(self) -> None:
        self.blocks = json_blocks(read(SERVING))

    def test_every_json_block_parses_and_has_a_host_top_level_key(self) -> None:
        self.assertGreaterEqual(len(self.blocks), 2)  # mcpServers hosts and VS Code
        found = set()
        for block in self.blocks:
            with self.subTest(block=block[:60]):
                document = json.loads(block)
                self.assertEqual(len(document), 1, "one top-level key")
                (key,) = document
                self.assertIn(key, HOST_KEYS)
                found.add(key)
                for entry in document[key].values():
                    self.assertIn("--stdio", entry["args"])
                    self.assertIn("--notes-dir", entry["args"])
                    if key == "servers":
                        self.assertEqual(entry["type"], "stdio")  # VS Code names the transport
        self.assertEqual(found, set(HOST_KEYS))

    def test_each_checkout_configuration_serves_the_note_in_its_folder_and_exits_zero_at_eof(self) -> None:
        checkout = 0
        for block in self.blocks:
            document = json.loads(block)
            (servers,) = document.values()
            for name, entry in servers.items():
                if entry["command"] == INSTALLED_COMMAND:
                    continue  # tests/test_package.py runs these with the command installed
                checkout += 1
                with self.subTest(host=next(iter(document)), server=name):
                    run_host_configuration(self, entry)
        self.assertGreaterEqual(checkout, 2)


def run_host_configuration(
    test: unittest.TestCase, entry: dict[str, Any], extra_env: dict[str, str] | None = None
) -> None:
    """Start one host configuration as a host would, over a temporary notes folder; a first call must ask."""
    scratch = tempfile.mkdtemp(prefix="docs-host-")
    test.addCleanup(shutil.rmtree, scratch, True)
    notes = os.path.join(scratch, "Notes")
    os.mkdir(notes)
    note = os.path.join(notes, "tps.md")
    with open(note, "w", encoding="utf-8") as handle:
        handle.write("# TPS report\n\nNumbers.\n")
    state = os.path.join(scratch, "state")

    def fill(text: str) -> str:
        filled = (
            text.replace(CHECKOUT_PLACEHOLDER, ROOT)
            .replace(NOTES_PLACEHOLDER, notes)
            .replace(SECRET_PLACEHOLDER, os.urandom(32).hex())
        )
        # A placeholder the page does not explain would survive here.
        test.assertNotIn("ABSOLUTE/PATH", filled)
        test.assertNotIn("PASTE_", filled)
        return filled

    env = {key: value for key, value in os.environ.items() if not key.startswith("NOTES_MCP_")}
    env.update(extra_env or {})
    env["XDG_STATE_HOME"] = state
    env.update({key: fill(value) for key, value in entry.get("env", {}).items()})
    command = [shutil.which(fill(entry["command"]), path=env.get("PATH")) or fill(entry["command"])]
    command += [fill(arg) for arg in entry["args"]]
    stderr = tempfile.TemporaryFile()
    test.addCleanup(stderr.close)
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
    test.addCleanup(stop, proc)
    lines: queue.Queue[bytes | None] = queue.Queue()

    def drain() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.put(line)
        lines.put(None)  # EOF: the server ended

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    test.addCleanup(reader.join, GUARD)

    def exchange(message: dict[str, Any]) -> dict[str, Any]:
        proc.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        line = lines.get(timeout=GUARD)
        if line is None:
            stderr.seek(0)
            test.fail("the server ended early: " + stderr.read().decode("utf-8", "replace"))
        return json.loads(line)

    discovered = exchange({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": PROTOCOL_META}})
    test.assertIn("2026-07-28", discovered["result"]["supportedVersions"])
    arguments = {"workspaceUri": pathlib.Path(notes).as_uri(), "title": "TPS"}
    params = {"_meta": PROTOCOL_META, "name": "notes_delete", "arguments": arguments}
    first = exchange({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})["result"]
    test.assertEqual(first["resultType"], "input_required")
    form = first["inputRequests"]["delete_choice"]["params"]["requestedSchema"]
    test.assertEqual(form["properties"]["note_id"]["oneOf"], [{"const": "tps.md", "title": "TPS report"}])
    proc.stdin.close()  # type: ignore[union-attr]
    status = proc.wait(GUARD)
    stderr.seek(0)
    test.assertEqual(status, 0, stderr.read().decode("utf-8", "replace"))
    test.assertTrue(os.path.exists(note))  # a first call asks; it never deletes
    test.assertTrue(os.path.exists(os.path.join(state, "notes-mcp", "nonces.db")))  # XDG_STATE_HOME was used


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the server if it is still running and close its pipes."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(GUARD)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None and not pipe.closed:
            pipe.close()


class LinkTests(unittest.TestCase):
    """Every link in README.md and docs/*.md stays in the repository and resolves."""

    def test_every_relative_link_points_at_a_file_that_exists(self) -> None:
        for page in documented_pages():
            with self.subTest(page=os.path.relpath(page, ROOT)):
                self.assertEqual(broken_links(page, read(page)), [])

    def test_no_link_starts_with_a_parent_folder(self) -> None:
        for page in documented_pages():
            with self.subTest(page=os.path.relpath(page, ROOT)):
                self.assertEqual([t for t in link_targets(read(page)) if t.startswith("../")], [])

    def test_the_checker_reports_missing_files_parent_folders_and_urls_but_not_code(self) -> None:
        text = "[a](docs/nope.md) [b](../shared/DESIGN.md) [c](https://example.com) `[d](gone.md)` [e](README.md#x)"
        self.assertEqual(broken_links(README, text), ["docs/nope.md", "../shared/DESIGN.md", "https://example.com"])

    def test_every_anchor_names_a_heading_of_the_page_it_points_at(self) -> None:
        for page in documented_pages():
            with self.subTest(page=os.path.relpath(page, ROOT)):
                self.assertEqual(dead_anchors(page, read(page)), [])

    def test_the_anchor_checker_follows_headings_with_code_punctuation_and_repeats(self) -> None:
        page = "# Use it (`mcpServers`)\n## Tests\n## Tests\n```\n# not a heading\n```\n"
        self.assertEqual(anchors(page), {"use-it-mcpservers", "tests", "tests-1"})
        text = (
            "[a](#use-it-mcpservers) [b](#tests-1) [c](#not-a-heading) [d](serving.md#start-it) [e](serving.md#nowhere)"
        )
        self.assertEqual(
            dead_anchors(README, page + text.replace("serving.md", "docs/serving.md")),
            ["#not-a-heading", "docs/serving.md#nowhere"],
        )

    def test_the_readme_links_every_docs_page(self) -> None:
        linked = {os.path.normpath(os.path.join(ROOT, t.split("#")[0])) for t in link_targets(read(README))}
        for page in documented_pages()[1:]:
            self.assertIn(page, linked)


class RunnableSnippetTests(unittest.TestCase):
    """Every ```python block in the documentation runs as shown, with code/ on the import path, in an empty folder."""

    def test_every_python_block_runs_and_exits_zero(self) -> None:
        ran = 0
        for page in documented_pages():
            for index, block in enumerate(
                snippet.body for snippet in snippets(read(page)) if snippet.lang == "python" and not snippet.not_run
            ):
                ran += 1
                with self.subTest(page=os.path.relpath(page, ROOT), block=index):
                    folder = tempfile.mkdtemp(prefix="docs-snippet-")
                    self.addCleanup(shutil.rmtree, folder, True)
                    env = {key: value for key, value in os.environ.items() if not key.startswith("NOTES_MCP_")}
                    env["PYTHONPATH"] = support.CODE
                    argv = [*support.python(), "-c", block]
                    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=GUARD)
                    self.assertEqual(done.returncode, 0, done.stderr)
        self.assertGreaterEqual(ran, 2)


# ------------------------------------------------------------------ shell blocks, pasted whole

SHELL_LANGS = ("sh", "bash", "shell")
# An untagged block starting with one of these is a command someone will paste: it is tagged sh.
COMMAND_STARTS = (
    "python3 ",
    "notes-mcp ",
    "export ",
    "curl ",
    "pip ",
    "pipx ",
    "uvx ",
    "docker ",
    "sqlite3 ",
    "bwrap ",
    "git ",
    "conformance.sh ",
    "node ",
    "npm ",
    "NOTES_MCP_",
    "PYTHONPATH=",
    "TMPDIR=",
    "sh ",
)
# Paths that exist on one machine only: a home folder, a scratch install, this machine's checkout.
_MACHINE_LOCAL_RE = re.compile(r"(?<![\w.$])/(?:home|root|Users|work)/|/tmp/h\d|PYTHONPATH=/")
_SERVER_START_RE = re.compile(r"(?:code/serve\.py|notes-mcp) --http\b")
_FIXED_PORT_RE = re.compile(r"--port (?!0\b)\d+")
# Blocks the runner must find runnable (it runs every runnable block; these are the ones the pages must keep so).
RUN_AT_LEAST = frozenset(
    {
        ("README.md", "(cd code && python3 -m unittest discover tests -v)"),
        (
            "docs/serving.md",
            "python3 code/serve.py --stdio                                  # the lesson fixture in memory, as alice",
        ),
        ("docs/serving.md", 'python3 code/serve.py --stdio --notes-dir "$HOME/Notes"        # your Markdown notes'),
        ("docs/serving.md", 'export NOTES_MCP_TOKEN=$(python3 -c "import secrets; print(secrets.token_urlsafe(24))")'),
        ("docs/serving.md", 'export NOTES_MCP_SECRET=$(python3 -c "import secrets; print(secrets.token_hex(32))")'),
        (
            "docs/serving.md",
            "NOTES=$(mktemp -d)                                    # a scratch notes folder with one note",
        ),
        ("docs/serving.md", "python3 code/serve.py --stdio"),
        ("docs/tools.md", "python3 code/serve.py --stdio --db notes.db --notes-tools"),
        ("docs/conformance.md", "python3 code/serve.py --http --port 0 --no-auth --conformance-fixtures"),
    }
)


def shell_blocks() -> list[tuple[str, Snippet]]:
    """Every shell block of README.md and docs/*.md, with its page (relative to the root)."""
    return [
        (os.path.relpath(page, ROOT), snippet)
        for page in documented_pages()
        for snippet in snippets(read(page))
        if snippet.lang in SHELL_LANGS
    ]


def runnable_shell_blocks() -> list[tuple[str, Snippet]]:
    """The shell blocks the runner pastes: every one without a not-run reason."""
    return [(page, snippet) for page, snippet in shell_blocks() if snippet.not_run is None]


_TRAILING_COMMENT_RE = re.compile(r"""\s+#[^'"`$\\]*$""")


def shell_commands(block: str) -> str:
    """What the shell runs of `block`: its lines without comment lines, trailing comments and trailing blanks.

    A trailing comment is dropped only where it holds no quote, `$` or backslash, and only
    when what is before it has balanced quotes: then `#` cannot be inside a word.
    """
    kept = []
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        comment = _TRAILING_COMMENT_RE.search(line)
        if comment and line[: comment.start()].count('"') % 2 == 0 and line[: comment.start()].count("'") % 2 == 0:
            line = line[: comment.start()]
        kept.append(line.rstrip())
    return "\n".join(kept)


def leaves_servers(block: str) -> int:
    """How many HTTP servers a block leaves running when it is done: those it starts, if its last command starts one
    (else 0)."""
    commands = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return len(_SERVER_START_RE.findall(block)) if commands and _SERVER_START_RE.search(commands[-1]) else 0


class Pasted(NamedTuple):
    """What pasting one block into bash did: the shell's status (None: stopped by the runner), its output, its error
    lines."""

    status: int | None
    stdout: str
    stderr: list[str]
    scratch: str


def link_or_copy(source: str, target: str) -> str:
    """A hard link at `target` to the file `source` (no bytes copied), or a copy where the two folders cannot share one.

    A pasted block writes new files beside these (a database, bytecode, by replacing a file
    rather than writing into it), so the checkout's own files are never changed through a link.
    """
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    return target


def paste(test: unittest.TestCase, block: str) -> Pasted:
    """Feed `block` to `bash -e` on its stdin, as a terminal paste does, in a scratch checkout, home and TMPDIR; stop
    what it leaves running.

    The scratch folder holds a copy of code/ and tests/ (the working directory), a home
    with Notes/tps.md, and TMPDIR. A fixed --port becomes --port 0 (tests listen on free
    ports only). A block whose last command starts HTTP servers is stopped with SIGTERM once
    each has printed its URL; any other block must end by itself with status 0. Either way
    the runner waits until every process the block started has closed its stderr.

    The copy keeps the bytecode the checkout holds, and the block's Pythons write what they
    compile, as in a reader's checkout: a `serve.py` started with neither compiles every
    module it imports (about 0.3 s of CPU a start instead of 0.1 s). Its `python3` is the
    interpreter running the tests (a `python3` first on its PATH), not whatever a version
    manager's shim would pick on this machine, at some 0.07 s of CPU a call.
    """
    scratch = tempfile.mkdtemp(prefix="docs-paste-")
    test.addCleanup(shutil.rmtree, scratch, True)
    checkout, home, tmp, bindir = (os.path.join(scratch, name) for name in ("checkout", "home", "tmp", "bin"))
    for part in ("code", "tests"):
        shutil.copytree(
            os.path.join(ROOT, part),
            os.path.join(checkout, part),
            ignore=shutil.ignore_patterns("*.db", "*.db-*"),
            copy_function=link_or_copy,
        )
    os.makedirs(os.path.join(home, "Notes"))
    os.mkdir(tmp)
    os.mkdir(bindir)
    os.symlink(sys.executable, os.path.join(bindir, "python3"))
    with open(os.path.join(home, "Notes", "tps.md"), "w", encoding="utf-8") as handle:
        handle.write("# TPS report\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("NOTES_MCP_", "XDG_", "PYTHON"))}
    env.update(HOME=home, TMPDIR=tmp, PATH=bindir + os.pathsep + env.get("PATH", os.defpath))
    servers = leaves_servers(block)
    proc = subprocess.Popen(["bash", "-e", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=checkout, env=env, start_new_session=True)  # fmt: skip
    stderr: list[str] = []
    stdout: list[bytes] = []
    changed = threading.Condition()
    ended = threading.Event()

    def drain_stderr() -> None:
        for raw in proc.stderr:  # type: ignore[union-attr]
            with changed:
                stderr.append(raw.decode("utf-8", "replace").rstrip("\n"))
                changed.notify_all()
        with changed:
            ended.set()
            changed.notify_all()

    readers = [
        threading.Thread(target=drain_stderr, daemon=True),
        threading.Thread(target=lambda: stdout.extend(proc.stdout or ()), daemon=True),
    ]
    for reader in readers:
        reader.start()

    def stop_group() -> None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    test.addCleanup(stop_group)
    proc.stdin.write(_FIXED_PORT_RE.sub("--port 0", block).encode())  # type: ignore[union-attr]
    proc.stdin.close()  # type: ignore[union-attr]
    status: int | None
    if servers:
        with changed:
            changed.wait_for(
                lambda: ended.is_set() or sum("notes-mcp: listening on " in line for line in stderr) >= servers, GUARD
            )
        stop_group()
        status = None
        proc.wait(GUARD)
    else:
        status = proc.wait(GUARD)
    for reader in readers:
        reader.join(GUARD)
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()  # type: ignore[union-attr]
    test.assertTrue(ended.is_set(), "a process the block started still holds its stderr")
    return Pasted(status, b"".join(stdout).decode("utf-8", "replace"), stderr, scratch)


class ShellBlockTests(unittest.TestCase):
    """Every shell block of README.md and docs/ can be pasted whole; the runner pastes each one it can and says why not
    for the rest."""

    def test_every_shell_block_is_pasted_by_the_runner_or_says_why_not(self) -> None:
        for page, snippet in shell_blocks():
            with self.subTest(page=page, line=snippet.line):
                self.assertTrue(snippet.not_run is None or snippet.not_run.strip(), "a not-run mark needs its reason")
        runnable = {(page, snippet.body.splitlines()[0]) for page, snippet in runnable_shell_blocks()}
        self.assertEqual(RUN_AT_LEAST - runnable, set())

    def test_every_command_block_is_tagged_as_shell(self) -> None:
        for page in documented_pages():
            for snippet in snippets(read(page)):
                with self.subTest(page=os.path.relpath(page, ROOT), line=snippet.line):
                    self.assertFalse(
                        snippet.lang == "" and snippet.body.startswith(COMMAND_STARTS), snippet.body.splitlines()[0]
                    )

    def test_no_shell_block_holds_a_path_of_one_machine(self) -> None:
        for page, snippet in shell_blocks():
            with self.subTest(page=page, line=snippet.line):
                self.assertIsNone(_MACHINE_LOCAL_RE.search(snippet.body))

    def test_the_block_checks_see_an_unmarked_command_a_local_path_and_a_server_left_running(self) -> None:
        text = (
            "```\npython3 code/serve.py --stdio\n```\n<!-- not run as a snippet: a reason "
            "-->\n```sh\nPYTHONPATH=/tmp/h12-pg x\n```\n"
        )
        first, second = snippets(text)
        self.assertTrue(first.lang == "" and first.body.startswith(COMMAND_STARTS))
        self.assertEqual((second.lang, second.not_run, second.line), ("sh", "a reason", 5))
        self.assertIsNotNone(_MACHINE_LOCAL_RE.search(second.body))
        self.assertIsNone(_MACHINE_LOCAL_RE.search('cd "$HOME/Notes" && ls /tmp/perf'))
        self.assertEqual(
            leaves_servers("export X=1\npython3 code/serve.py --http --port 8765 &\nnotes-mcp --http --port 8766 &\n"),
            2,
        )
        self.assertEqual(leaves_servers("python3 code/serve.py --http --port 0 &\nkill $!\n"), 0)

    def test_two_blocks_differing_only_in_comments_run_the_same_commands_and_quoted_hashes_are_kept(self) -> None:
        commented = "python3 code/serve.py --stdio        # the lesson fixture in memory, as alice\n"
        self.assertEqual(shell_commands(commented), shell_commands("python3 code/serve.py --stdio\n"))
        self.assertEqual(shell_commands("# a note\nexport A=1  # why\n\necho $A\n"), "export A=1\necho $A")
        for kept in ('echo "a  # b"', "echo 'x  # y'", 'echo "$X"  # z $HOME', "printf '%s' a  # it's"):
            with self.subTest(line=kept):
                self.assertEqual(shell_commands(kept), kept)
        self.assertNotEqual(shell_commands("python3 code/serve.py --stdio"), shell_commands("python3 code/serve.py"))

    @unittest.skipIf(
        shutil.which("bash") is None, "bash is not installed: the blocks cannot be pasted as a terminal would"
    )
    def test_each_pasteable_block_runs_whole_in_a_scratch_folder_and_leaves_nothing_running(self) -> None:
        pasted_commands: set[str] = set()  # the commands of each block pasted so far
        for page, snippet in runnable_shell_blocks():
            if 'curl -sS "$URL"' in snippet.body:
                continue  # the walkthrough has its own test below, with its answers checked
            with self.subTest(page=page, line=snippet.line, block=snippet.body.splitlines()[0][:60]):
                commands = shell_commands(snippet.body)
                if commands in pasted_commands:
                    continue  # the shell runs exactly what it ran for that block: its outcome is known
                pasted_commands.add(commands)
                pasted = paste(self, snippet.body)
                if leaves_servers(snippet.body):
                    self.assertEqual(
                        sum("notes-mcp: listening on " in line for line in pasted.stderr),
                        leaves_servers(snippet.body),
                        pasted.stderr,
                    )
                else:
                    self.assertEqual(pasted.status, 0, "\n".join(pasted.stderr))
                # A stdio server reading the block's later lines as messages answers -32700.
                self.assertNotIn("-32700", pasted.stdout)
                self.assertFalse(any("Traceback" in line for line in pasted.stderr), pasted.stderr)

    @unittest.skipIf(
        shutil.which("curl") is None or shutil.which("bash") is None,
        "curl or bash is not installed: the walkthrough cannot run as written",
    )
    def test_the_curl_walkthrough_pasted_whole_deletes_once_refuses_the_replay_and_stops_its_server(self) -> None:
        import main

        (block,) = [snippet.body for page, snippet in runnable_shell_blocks() if 'curl -sS "$URL"' in snippet.body]
        self.assertIsNone(_FIXED_PORT_RE.search(block))  # run exactly as written: nothing to rewrite
        pasted = paste(self, block)
        self.assertEqual(pasted.status, 0, pasted.stderr)
        first, second, third = (json.loads(line) for line in pasted.stdout.splitlines() if line.strip())
        self.assertEqual(first["result"]["resultType"], "input_required")
        self.assertIs(second["result"]["structuredContent"]["deleted"], True)
        self.assertEqual(third["error"]["code"], main.INVALID_PARAMS)
        (notes,) = [
            os.path.join(pasted.scratch, "tmp", name)
            for name in os.listdir(os.path.join(pasted.scratch, "tmp"))
            if not name.endswith(".log")
        ]
        self.assertEqual(os.listdir(notes), [".trash"])  # tps.md, and only it, is gone: into the trash
        self.assertEqual([name.endswith("-tps.md") for name in os.listdir(os.path.join(notes, ".trash"))], [True])
        with open(notes + ".log", encoding="utf-8") as handle:
            log = handle.read().splitlines()
        self.assertIn(
            "notes-mcp: shutting down: stopped accepting; 0 request(s) in flight", log
        )  # step 4 stopped it: SIGTERM


SDK_URL_LINES = {
    "python": 'URL = "http://127.0.0.1:8765/mcp"',
    "js": 'const url = new URL("http://127.0.0.1:8765/mcp");',
}
TS_CLIENT = os.path.join(ROOT, ".ci", "ts-client")


def ci_npm_folder(name: str) -> str:
    """Where `.ci/setup-npm.sh NAME` installs .ci/NAME's pinned packages:
    ${XDG_CACHE_HOME:-~/.cache}/notes-mcp-ci/NAME."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "notes-mcp-ci", name)


def npm_tool_ready(name: str, package: str) -> bool:
    """True when node is here and `package` is installed at the version .ci/NAME/package.json pins."""
    try:
        with open(os.path.join(ROOT, ".ci", name, "package.json"), encoding="utf-8") as handle:
            pinned = json.load(handle)["dependencies"][package]
        with open(
            os.path.join(ci_npm_folder(name), "node_modules", *package.split("/"), "package.json"), encoding="utf-8"
        ) as handle:
            return shutil.which("node") is not None and json.load(handle)["version"] == pinned
    except (OSError, ValueError, KeyError):
        return False


def mcp_importable() -> bool:
    """True when this interpreter has the official MCP Python SDK (the CI's venv: .ci/setup-clients.sh)."""
    import importlib.util

    return importlib.util.find_spec("mcp") is not None


class SdkClientTests(unittest.TestCase):
    """docs/serving.md's official SDK clients, as written, against a real HTTP server with a bearer token: the note goes
    to the trash."""

    def client_block(self, lang: str) -> str:
        (block,) = [
            snippet.body
            for snippet in snippets(read(SERVING))
            if snippet.lang == lang and SDK_URL_LINES[lang] in snippet.body
        ]
        return block

    def run_client(self, lang: str, command: list[str], folder: str) -> None:
        """Start a server over `folder` (one note), write the block pointed at it, run `command` + [file, folder]; check
        the deletion."""
        from helpers import procs

        notes = os.path.join(folder, "Notes")
        os.mkdir(notes)
        with open(os.path.join(notes, "tps.md"), "w", encoding="utf-8") as handle:
            handle.write("# TPS report\n")
        env = procs.server_env(
            NOTES_MCP_TOKEN=procs.TOKEN, NOTES_MCP_SECRET=procs.SECRET, XDG_STATE_HOME=os.path.join(folder, "state")
        )
        server = procs.HttpServer(self, "--notes-dir", notes, env=env)
        block = self.client_block(lang)
        self.assertEqual(block.count(SDK_URL_LINES[lang]), 1)
        script = os.path.join(folder, "client.py" if lang == "python" else "client.mjs")
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(
                block.replace(
                    SDK_URL_LINES[lang], SDK_URL_LINES[lang].replace("http://127.0.0.1:8765/mcp", str(server.url))
                )
            )
        done = subprocess.run(
            [*command, script, notes], capture_output=True, text=True, timeout=GUARD, cwd=folder, env=env
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn('1 note matches "TPS"', done.stdout)  # the form's message, as the client was shown it
        self.assertRegex(done.stdout, r"deleted'?: [Tt]rue")
        self.assertEqual(os.listdir(notes), [".trash"])  # tps.md went to the trash, and only it
        self.assertEqual([name.endswith("-tps.md") for name in os.listdir(os.path.join(notes, ".trash"))], [True])

    @unittest.skipUnless(
        mcp_importable(),
        "the mcp package is absent: .ci/setup-clients.sh installs it (and .ci/run runs the suite with it)",
    )
    def test_the_python_sdk_client_deletes_the_note_with_the_token(self) -> None:
        folder = tempfile.mkdtemp(prefix="docs-sdk-python-")
        self.addCleanup(shutil.rmtree, folder, True)
        self.run_client("python", [sys.executable], folder)

    @unittest.skipUnless(
        npm_tool_ready("ts-client", "@modelcontextprotocol/client"),
        "the TypeScript MCP client is not installed (needs node; sh .ci/setup-npm.sh ts-client, which .ci/run runs)",
    )
    def test_the_typescript_sdk_client_deletes_the_note_with_the_token(self) -> None:
        folder = tempfile.mkdtemp(prefix="docs-sdk-ts-")
        self.addCleanup(shutil.rmtree, folder, True)
        # Node resolves an ES module's imports from the folders above the file: the pinned install, linked in.
        os.symlink(os.path.join(ci_npm_folder("ts-client"), "node_modules"), os.path.join(folder, "node_modules"))
        self.run_client("js", ["node"], folder)


class MermaidTests(unittest.TestCase):
    """Every ```mermaid block in README.md and docs/*.md names a diagram type and is well-formed enough to draw."""

    def test_every_mermaid_block_starts_with_a_diagram_type_and_is_well_formed(self) -> None:
        drawn = 0
        for page in documented_pages():
            for index, block in enumerate(mermaid_blocks(read(page))):
                drawn += 1
                with self.subTest(page=os.path.relpath(page, ROOT), block=index):
                    self.assertEqual(mermaid_problems(block), [])
        self.assertGreaterEqual(drawn, 3)

    def test_the_two_call_flow_the_three_layers_and_the_legacy_adapter_are_drawn(self) -> None:
        kinds = {
            page: [block.split()[0] for block in mermaid_blocks(read(os.path.join(ROOT, page)))]
            for page in ("README.md", "docs/security.md", "docs/legacy.md")
        }
        self.assertIn("sequenceDiagram", kinds["README.md"])
        self.assertIn("flowchart", kinds["docs/security.md"])
        self.assertIn("flowchart", kinds["docs/legacy.md"])

    def test_the_checker_reports_a_wrong_type_open_blocks_undeclared_actors_and_keyword_nodes(self) -> None:
        self.assertEqual(mermaid_problems("sequence\n  A->>B: x\n"), ["'sequence' is not a Mermaid diagram type"])
        self.assertEqual(
            mermaid_problems("sequenceDiagram\n  participant A\n  A->>B: x\n"), ["'B' used before it is declared"]
        )
        self.assertEqual(
            mermaid_problems("sequenceDiagram\n  participant A\n  loop again\n  A->>A: x\n"),
            ["1 block(s) without `end`"],
        )
        self.assertEqual(
            mermaid_problems("sequenceDiagram\n  participant A\n  Note over A,B: x\n"),
            ["'B' used before it is declared"],
        )
        self.assertEqual(mermaid_problems("flowchart LR\n  subgraph s\n  a --> b\n"), ["1 subgraph(s) without `end`"])
        self.assertEqual(
            mermaid_problems('flowchart LR\n  call["x"] --> b\n'),
            ["a node named 'call', a Mermaid keyword: call[\"x\"] --> b"],
        )
        self.assertEqual(mermaid_problems("flowchart LR\n  a[x (y] --> b\n"), ["unbalanced (): a[x (y] --> b"])
        self.assertEqual(
            mermaid_problems("sequenceDiagram\n  participant A\n  A->>A: x; y\n"),
            ["a `;` ends the statement, so the rest of the message is read as a new one: A->>A: x; y"],
        )
        good = (
            "sequenceDiagram\n  participant A as Client\n  participant B\n"
            "  alt yes\n  A->>B: x: y\n  else no\n  B-->>A: z\n  end\n"
        )
        self.assertEqual(mermaid_problems(good), [])
        self.assertEqual(
            mermaid_problems(
                'flowchart TB\n  subgraph s["a (b)"]\n  a{"q?"} -->|yes| b[("db")]\n  end\n  s -.->|no| c\n'
            ),
            [],
        )


MERMAID_CI = os.path.join(ROOT, ".ci", "mermaid")
MERMAID_PARSE = os.path.join(MERMAID_CI, "parse.mjs")


def mermaid_modules() -> str:
    """Where .ci/setup-npm.sh installs the pinned parser."""
    return ci_npm_folder("mermaid")


def pinned_mermaid() -> str:
    """The mermaid version .ci/mermaid/package.json pins."""
    with open(os.path.join(MERMAID_CI, "package.json"), encoding="utf-8") as handle:
        return str(json.load(handle)["dependencies"]["mermaid"])


def mermaid_parse(diagrams: list[str]) -> list[str | None]:
    """Mermaid's own parser over each diagram (node .ci/mermaid/parse.mjs): None where it parses, else its message."""
    done = subprocess.run(
        ["node", MERMAID_PARSE, mermaid_modules()],
        input=json.dumps(diagrams),
        capture_output=True,
        text=True,
        timeout=GUARD,
    )
    if done.returncode != 0:
        raise AssertionError(f"parse.mjs failed: {done.stderr}")
    answer = json.loads(done.stdout)
    if answer["version"] != pinned_mermaid():
        raise AssertionError(f"mermaid {answer['version']} answered, not the pinned {pinned_mermaid()}")
    return list(answer["results"])


@unittest.skipUnless(
    npm_tool_ready("mermaid", "mermaid"),
    "Mermaid's parser is not installed (needs node; sh .ci/setup-npm.sh mermaid, which .ci/run runs)",
)
class MermaidParserTests(unittest.TestCase):
    """Every ```mermaid block in README.md and docs/*.md parses with Mermaid's own parser, at the pinned version."""

    SEMICOLON = (
        "sequenceDiagram\n    participant S\n    S->>S: look up (none: the lesson's error); keep a pending record\n"
    )
    KEYWORD = "flowchart LR\n    a --> end\n"
    GOOD = 'flowchart LR\n    a["x (y)"] -->|no| b{"q?"}\n'
    blocks: list[tuple[str, str]]  # setUpClass sets these
    problems: list[str | None]

    @classmethod
    def setUpClass(cls) -> None:
        # One parser process for the class (node and Mermaid's modules load in about a second):
        # the documentation's blocks, then the three samples; each diagram is parsed on its own.
        pages = [(os.path.relpath(page, ROOT), read(page)) for page in documented_pages()]
        cls.blocks = [(page, block) for page, text in pages for block in mermaid_blocks(text)]
        cls.problems = mermaid_parse([block for _, block in cls.blocks] + [cls.SEMICOLON, cls.KEYWORD, cls.GOOD])

    def test_every_mermaid_block_parses_with_mermaids_own_parser(self) -> None:
        blocks = self.blocks
        self.assertGreaterEqual(len(blocks), 5)
        for (page, block), problem in zip(blocks, self.problems[: len(blocks)], strict=True):
            with self.subTest(page=page, diagram=block.splitlines()[1].strip()):
                self.assertIsNone(problem)

    def test_the_parser_refuses_a_semicolon_in_a_message_and_a_keyword_node(self) -> None:
        refused, keyword_refused, parsed = self.problems[len(self.blocks) :]
        self.assertIn("Parse error", refused or "")
        self.assertIn("Parse error", keyword_refused or "")
        self.assertIsNone(parsed)


# ------------------------------------------------------------------ the words of the forms and pages

_BUTTON_RE = re.compile(r"<button[^>]*>([^<{]+)</button>")  # a literal button label in a page's HTML
_CONFIRM_FORM_RE = re.compile(r'confirm_form\([^()]*?, "([^"]+)"\)')  # a note tool's one-checkbox form
_APPLY_LABEL_RE = re.compile(r'apply_label = "[^"]*", "([^"]+)"')  # the page's approving button for a note tool
# How a page names a control: a "Label" box, a **Label** button, the checkbox **Label** ...
_CONTROL_NAMED_RE = re.compile(
    r'(?:\*\*([^*\n]+)\*\*|"([^"\n]+)") (?:box|checkbox|button)\b|\b(?:box|checkbox|button) '
    r'(?:\*\*([^*\n]+)\*\*|"([^"\n]+)")'
)


def interface_labels() -> dict[str, str]:
    """Every label a person reads on a control the product shows (form fields, page buttons): label -> where in
    code/."""
    import main

    form = main.delete_form("file:///w", "TPS", [main.Note("a.md", "TPS", "file:///w/a.md")], "")
    labels = {field["title"]: "main.delete_form" for field in form["params"]["requestedSchema"]["properties"].values()}
    for path in sorted(pathlib.Path(ROOT, "code").glob("*.py")):
        if path.stem == "conformance_fixtures":
            continue  # the conformance suite's test forms: not the product's
        text = path.read_text(encoding="utf-8")
        for pattern in (_BUTTON_RE, _CONFIRM_FORM_RE, _APPLY_LABEL_RE):
            labels.update({label: f"code/{path.name}" for label in pattern.findall(text)})
    return labels


def controls_named(text: str) -> list[str]:
    """The labels a page gives controls it names as a box, checkbox or button ("the **Keep** button", a "Delete"
    box)."""
    return [next(group for group in found if group) for found in _CONTROL_NAMED_RE.findall(_FENCE_RE.sub("", text))]


class InterfaceWordsTests(unittest.TestCase):
    """The docs name each form field and page button by the exact words the product shows."""

    def test_the_labels_are_read_from_the_code(self) -> None:
        labels = interface_labels()
        for label in (
            "Note to delete",
            "Delete the chosen note",
            "Move to trash",
            "Keep",
            "Sign in",
            "Apply",
            "Apply this change",
            "Move the note",
            "Allow",
            "Deny",
            "Disconnect",
        ):
            self.assertIn(label, labels)

    def test_every_label_is_quoted_in_bold_in_the_docs(self) -> None:
        text = "\n".join(read(page) for page in documented_pages())
        for label, where in interface_labels().items():
            with self.subTest(label=label, code=where):
                self.assertTrue(f"**{label}**" in text, f"no page quotes **{label}** ({where})")

    def test_every_control_a_page_names_has_that_label_in_the_product(self) -> None:
        labels = interface_labels()
        named = 0
        for page in documented_pages():
            for label in controls_named(read(page)):
                named += 1
                with self.subTest(page=os.path.relpath(page, ROOT), label=label):
                    self.assertIn(label, labels)
        self.assertGreaterEqual(named, 1)  # the form's box in docs/serving.md

    def test_the_control_finder_reads_quotes_and_bold_before_and_after_the_word(self) -> None:
        text = (
            'a "Delete it permanently" box, the **Keep** button, the checkbox **Apply**; "not" a name\n```\na "Code" '
            "box\n```\n"
        )
        self.assertEqual(controls_named(text), ["Delete it permanently", "Keep", "Apply"])


class ImageTests(unittest.TestCase):
    """Every image in README.md and docs/*.md is a file of the repository."""

    def test_every_image_link_names_an_image_file_in_docs_img(self) -> None:
        images = 0
        for page in documented_pages():
            for target in re.findall(
                r"!\[[^\]]*\]\(([^)\s]+)\)", _INLINE_CODE_RE.sub("", _FENCE_RE.sub("", read(page)))
            ):
                images += 1
                path = os.path.normpath(os.path.join(os.path.dirname(page), target))
                with self.subTest(page=os.path.relpath(page, ROOT), image=target):
                    self.assertTrue(os.path.isfile(path))
                    self.assertEqual(os.path.dirname(path), os.path.join(DOCS, "img"))
                    self.assertIn(os.path.splitext(path)[1], (".svg", ".png"))
        self.assertGreaterEqual(images, 2)


class FiguresTests(unittest.TestCase):
    """A limit, a test count or a contents list in the docs says what the code says."""

    def test_every_value_quoted_beside_a_constants_name_is_its_value(self) -> None:
        constants = code_constants()
        quoted = 0
        for page in documented_pages():
            text = read(page)
            quoted += len(_QUOTED_LIMIT_RE.findall(text)) + len(_TABLE_LIMIT_RE.findall(text))
            with self.subTest(page=os.path.relpath(page, ROOT)):
                self.assertEqual(wrong_limits(text, constants), [])
        self.assertGreaterEqual(quoted, 60)

    def test_the_limit_checker_converts_units_and_reports_a_stale_value(self) -> None:
        constants: dict[str, dict[str, float]] = {
            "WAIT_MS": {"a": 2000},
            "PAUSE_SECONDS": {"a": 0.01},
            "MAX_BYTES": {"a": 16384, "b": 64},
        }
        good = (
            "`WAIT_MS` (2 s) `WAIT_MS` = 2000 `PAUSE_SECONDS` (10 ms) `MAX_BYTES` (16 KiB) `b.MAX_BYTES` (64)\n| "
            "`MAX_BYTES` | 64 |\n"
        )
        self.assertEqual(wrong_limits(good, constants), [])
        bad = "`a.MAX_BYTES` (64) `GONE` (3) `MAX_BYTES` (16 KiB + 4) `WAIT_MS` (2**3)\n| `WAIT_MS` | 3 s |\n"
        self.assertEqual(len(wrong_limits(bad, constants)), 3)  # the last two are not single values: not checked

    def test_every_quoted_test_count_is_what_that_module_runs(self) -> None:
        quoted = [(module, count) for page in documented_pages() for module, count in quoted_test_counts(read(page))]
        self.assertGreaterEqual(len(quoted), 4)
        for module, count in quoted:
            with self.subTest(module=module):
                self.assertEqual(test_count(module), count)

    def test_every_contents_list_links_every_section_of_its_page(self) -> None:
        for page in documented_pages():
            with self.subTest(page=os.path.relpath(page, ROOT)):
                self.assertEqual(missing_from_contents(read(page)), [])

    def test_the_contents_checker_reports_a_section_left_out(self) -> None:
        page = "# P\n\nContents\n\n- [One](#one)\n  - [Sub](#sub)\n\n## One\n### Sub\n## Two (new)\n"
        self.assertEqual(missing_from_contents(page), ["Two (new)"])


BENCHMARKS = os.path.join(DOCS, "benchmarks.md")
RECORDED_FIGURES = os.path.join(DOCS, "img", "bench-figures.json")


def percent(share: float) -> str:
    """A share as the docs write it: whole percent, a space before the sign."""
    return f"{share:.0%}".replace("%", " %")


class RecordedFiguresTests(unittest.TestCase):
    """The speed and scaling figures of README.md and docs/benchmarks.md are the recorded runs the plots are drawn
    from."""

    def setUp(self) -> None:
        with open(RECORDED_FIGURES, encoding="utf-8") as handle:
            self.figures = json.load(handle)

    def share_range(self, transport: str, part: str) -> str:
        shares = [run[part] / run["ceiling"] for run in self.figures["speed"] if run["transport"] == transport]
        return f"{min(shares):.0%}–{max(shares):.0%}".replace("%", "") + " %"

    def test_the_readmes_speed_table_gives_the_range_of_the_recorded_runs(self) -> None:
        readme = read(README)
        self.assertIn(
            f"| Round trips/s, as a share of the canned responder's | {self.share_range('stdio', 'server')} | "
            f"{self.share_range('http', 'server')} |",
            readme,
        )
        self.assertIn(
            f"(sign, verify, claim) | {self.share_range('stdio', 'floor')} | {self.share_range('http', 'floor')} |",
            readme,
        )

    def test_the_benchmarks_speed_table_holds_each_recorded_run(self) -> None:
        text = read(BENCHMARKS)
        numbers: dict[str, int] = {}
        for run in self.figures["speed"]:
            numbers[run["transport"]] = numbers.get(run["transport"], 0) + 1
            ceiling, floor, server = run["ceiling"], run["floor"], run["server"]
            name = "HTTP" if run["transport"] == "http" else run["transport"]
            row = (
                f"| {name} | {numbers[run['transport']]} | {ceiling:,} | {floor:,} ({percent(floor / ceiling)}) | "
                f"{server:,} ({percent(server / ceiling)}) |"
            )
            with self.subTest(row=row):
                self.assertIn(row, text)

    def test_the_scaling_figures_in_the_readme_and_benchmarks_are_the_recorded_run(self) -> None:
        scaling = self.figures["scaling"]
        kept = {kind: rates[-1] / rates[0] for kind, rates in scaling["rates"].items() if rates[-1] is not None}
        self.assertIn(
            f"keep {percent(kept['sqlite'])}, {percent(kept['postgres'])} and {percent(kept['folder'])} of their",
            read(README),
        )
        text = read(BENCHMARKS)
        names = {
            "sqlite": "SQLite",
            "postgres": "PostgreSQL",
            "folder": "folder (inotify)",
            "memory": "memory (not in the goal)",
        }
        for kind, rates in scaling["rates"].items():
            cells = " | ".join("not served" if rate is None else f"{rate:,}" for rate in rates)
            with self.subTest(store=kind):
                self.assertIn(f"| {names[kind]} | {cells} |", text)


class ServerShownTests(unittest.TestCase):
    """What docs/serving.md shows the server printing is what it prints."""

    def env(self, folder: str) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("NOTES_MCP_", "XDG_"))}
        env.update(HOME=folder, NOTES_MCP_SECRET=os.urandom(32).hex())
        return env

    def test_the_start_up_report_shown_is_what_the_server_prints_for_that_folder(self) -> None:
        (shown,) = [block for block in _FENCE_RE.findall(read(SERVING)) if "notes-mcp: serving on stdio" in block]
        shown_lines = shown.splitlines()[1:-1]
        home = tempfile.mkdtemp(prefix="docs-report-")
        self.addCleanup(shutil.rmtree, home, True)
        notes = os.path.join(home, "Notes")  # the page's /home/alice/Notes
        os.mkdir(notes)
        for name, text in (
            ("a.md", "# A\n"),
            ("b.md", "# B\n"),
            ("50% done.md", "# Half\n"),
            (".draft.md", "# Hidden\n"),
        ):
            with open(os.path.join(notes, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        os.symlink(os.path.join(notes, "a.md"), os.path.join(notes, "link.md"))
        os.mkfifo(os.path.join(notes, "pipe.md"))
        done = subprocess.run(
            [*support.python(), os.path.join(support.CODE, "serve.py"), "--stdio", "--notes-dir", notes],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=GUARD, env=self.env(home),
        )  # fmt: skip
        self.assertEqual(done.returncode, 0, done.stderr)
        printed = done.stderr.replace(home, "/home/alice").splitlines()
        sandbox = "notes-mcp: sandbox:"
        # The sandbox line counts this machine's library folders and says what its kernel has.
        self.assertEqual([line.startswith(sandbox) for line in shown_lines][-1], True)
        self.assertEqual([line for line in printed if line.startswith(sandbox)][:1], [printed[-1]])
        self.assertEqual(printed[:-1], shown_lines[:-1])

    def test_the_stdio_line_to_type_gets_the_answer_shown(self) -> None:
        section = read(SERVING).split("\n## stdio\n", 1)[1].split("\n## ", 1)[0]
        typed, begins = [block.splitlines()[1] for block in _FENCE_RE.findall(section) if block.startswith("```\n")][:2]
        self.assertEqual(json.loads(typed)["method"], "tools/call")
        home = tempfile.mkdtemp(prefix="docs-stdio-")
        self.addCleanup(shutil.rmtree, home, True)
        done = subprocess.run(
            [*support.python(), os.path.join(support.CODE, "serve.py"), "--stdio"],
            input=typed + "\n", capture_output=True, text=True, timeout=GUARD, env=self.env(home),
        )  # fmt: skip
        self.assertEqual(done.returncode, 0, done.stderr)  # end of input: exit status 0
        (answer,) = done.stdout.splitlines()
        self.assertTrue(answer.startswith(begins), answer[:200])
        self.assertEqual(json.loads(answer)["result"]["resultType"], "input_required")


def version_key(version: str) -> tuple[int, ...]:
    """A dotted version as numbers, for ordering."""
    return tuple(int(part) for part in version.split("."))


class ProjectFilesTests(unittest.TestCase):
    """The licence is the one pyproject.toml names, and the changelog has the packaged version."""

    def setUp(self) -> None:
        with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
            self.project = tomllib.load(handle)["project"]

    def test_the_licence_file_is_the_mit_licence_pyproject_names(self) -> None:
        self.assertEqual(self.project["license"], {"text": "MIT"})
        lines = read(os.path.join(ROOT, "LICENSE")).splitlines()
        self.assertEqual(lines[0], "MIT License")
        self.assertEqual(lines[2], "Copyright (c) 2026 The notes-mcp authors")
        self.assertIn('THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR', lines)

    def test_the_changelog_has_the_packaged_version_and_only_a_newer_one_unreleased_above_it(self) -> None:
        sections = re.findall(
            r"^## (\d+\.\d+\.\d+)( \(unreleased\))?$", read(os.path.join(ROOT, "CHANGELOG.md")), re.MULTILINE
        )
        versions = [version for version, _ in sections]
        self.assertIn(self.project["version"], versions)
        self.assertEqual(versions, sorted(versions, key=version_key, reverse=True))  # newest first
        unreleased = [version for version, mark in sections if mark]
        self.assertLessEqual(len(unreleased), 1)
        if unreleased:
            self.assertEqual(versions[0], unreleased[0])
            self.assertGreater(version_key(unreleased[0]), version_key(self.project["version"]))


def script_help(path: str) -> str:
    """What `python3 PATH --help` prints, from the script's own `entry` run in this process.

    The same parser and the same text as a second Python would print, without one that
    imports every benchmark module again for a page of help.
    """
    module_name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(f"_help_{module_name}", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # the script's body below `if __name__ == "__main__"` does not run
    printed = io.StringIO()
    argv, sys.argv = sys.argv, [path, "--help"]  # argparse names the program from it
    try:
        with contextlib.redirect_stdout(printed), contextlib.suppress(SystemExit):
            script.entry(["--help"])
    finally:
        sys.argv = argv
    return printed.getvalue()


class ScriptHelpTests(unittest.TestCase):
    """A script's --help names every mode its docstring documents."""

    def test_bench_help_names_every_documented_mode(self) -> None:
        bench = next(
            path
            for path in (os.path.join(support.CODE, "bench.py"), os.path.join(support.CODE, "scripts", "bench.py"))
            if os.path.exists(path)
        )
        documented = set(re.findall(r"--mode ([a-z]+)", read(bench).split('"""')[1]))
        self.assertIn("idle", documented)
        shown = script_help(bench)
        for mode in documented:
            self.assertRegex(shown, rf"\b{mode}\b")


class FrontPageTests(unittest.TestCase):
    """README.md is a front page: short, with the two commands first."""

    def test_the_readme_is_at_most_150_lines(self) -> None:
        self.assertLessEqual(len(read(README).splitlines()), MAX_README_LINES)

    def test_the_first_code_block_holds_the_demo_and_the_test_commands(self) -> None:
        first = _FENCE_RE.search(read(README))
        assert first is not None
        commands = [line.split("#")[0].strip() for line in first.group(0).splitlines()[1:-1]]
        self.assertEqual(commands, ["python3 code/main.py", "python3 -m unittest discover"])

    def test_the_readme_names_the_checkpoint_command(self) -> None:
        self.assertIn("python3 -m unittest tests.test_checkpoints -v", read(README))


if __name__ == "__main__":
    unittest.main()
