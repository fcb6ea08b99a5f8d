"""The documentation: host configurations that really start, links that resolve, a short front page."""

from __future__ import annotations

import json
import os
import pathlib
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from typing import Any

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
    """The anchors a Markdown renderer gives the page's headings: lower case, punctuation dropped, spaces to `-`, repeats numbered."""
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
    for target in link_targets(text):
        path, _, anchor = target.partition("#")
        if not anchor or re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        linked = page if not path else os.path.normpath(os.path.join(os.path.dirname(page), path))
        if linked.endswith(".md") and os.path.exists(linked) and anchor not in anchors(text if not path else read(linked)):
            dead.append(target)
    return dead


def python_blocks(text: str) -> list[str]:
    """The bodies of every ```python block: complete programs (a sketch is shown some other way)."""
    return _PYTHON_BLOCK_RE.findall(text)


def documented_pages() -> list[str]:
    """README.md and every docs/*.md."""
    return [README] + sorted(str(path) for path in pathlib.Path(DOCS).glob("*.md"))


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


def run_host_configuration(test: unittest.TestCase, entry: dict[str, Any], extra_env: dict[str, str] | None = None) -> None:
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
        text = "[a](#use-it-mcpservers) [b](#tests-1) [c](#not-a-heading) [d](serving.md#start-it) [e](serving.md#nowhere)"
        self.assertEqual(dead_anchors(README, page + text.replace("serving.md", "docs/serving.md")), ["#not-a-heading", "docs/serving.md#nowhere"])

    def test_the_readme_links_every_docs_page(self) -> None:
        linked = {os.path.normpath(os.path.join(ROOT, t.split("#")[0])) for t in link_targets(read(README))}
        for page in documented_pages()[1:]:
            self.assertIn(page, linked)


class RunnableSnippetTests(unittest.TestCase):
    """Every ```python block in the documentation runs as shown, with code/ on the import path, in an empty folder."""

    def test_every_python_block_runs_and_exits_zero(self) -> None:
        ran = 0
        for page in documented_pages():
            for index, block in enumerate(python_blocks(read(page))):
                ran += 1
                with self.subTest(page=os.path.relpath(page, ROOT), block=index):
                    folder = tempfile.mkdtemp(prefix="docs-snippet-")
                    self.addCleanup(shutil.rmtree, folder, True)
                    env = {key: value for key, value in os.environ.items() if not key.startswith("NOTES_MCP_")}
                    env["PYTHONPATH"] = support.CODE
                    done = subprocess.run([sys.executable, "-c", block], cwd=folder, env=env, capture_output=True, text=True, timeout=GUARD)
                    self.assertEqual(done.returncode, 0, done.stderr)
        self.assertGreaterEqual(ran, 2)


_SH_BLOCK_RE = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)
CURL_URL_LINE = "URL=http://127.0.0.1:8765/mcp"  # the line of the walkthrough a test points at its own server


@unittest.skipIf(shutil.which("curl") is None, "curl is not installed: the walkthrough's requests cannot be sent as written")
class CurlWalkthroughTests(unittest.TestCase):
    """The curl walkthrough in docs/serving.md, run as written against a real server: ask, accept, replay refused."""

    def test_the_walkthrough_deletes_the_note_once_and_its_replay_is_refused(self) -> None:
        import main
        from helpers import procs

        (block,) = [body for body in _SH_BLOCK_RE.findall(read(SERVING)) if 'curl -sS "$URL"' in body]
        self.assertEqual(block.count(CURL_URL_LINE), 1)
        notes = tempfile.mkdtemp(prefix="docs-curl-")
        self.addCleanup(shutil.rmtree, notes, True)
        with open(os.path.join(notes, "tps.md"), "w", encoding="utf-8") as handle:
            handle.write("# TPS report\n")
        env = procs.server_env(NOTES_MCP_TOKEN=procs.TOKEN, NOTES_MCP_SECRET=procs.SECRET, XDG_STATE_HOME=os.path.join(notes, ".state"))
        server = procs.HttpServer(self, "--notes-dir", notes, env=env)
        script = block.replace(CURL_URL_LINE, f"URL={server.url}")
        done = subprocess.run(["sh", "-eu", "-c", script], env=dict(env, NOTES=notes), capture_output=True, text=True, timeout=GUARD)
        self.assertEqual(done.returncode, 0, done.stderr)
        first, second, third = (json.loads(line) for line in done.stdout.splitlines() if line.strip())
        self.assertEqual(first["result"]["resultType"], "input_required")
        self.assertIs(second["result"]["structuredContent"]["deleted"], True)
        self.assertEqual(third["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(sorted(os.listdir(notes)), [".state", ".trash"])  # tps.md, and only it, is gone
        self.assertEqual([name.endswith("-tps.md") for name in os.listdir(os.path.join(notes, ".trash"))], [True])  # into the trash


class ScriptHelpTests(unittest.TestCase):
    """A script's --help names every mode its docstring documents."""

    def test_bench_help_names_every_documented_mode(self) -> None:
        bench = next(path for path in (os.path.join(support.CODE, "bench.py"), os.path.join(support.CODE, "scripts", "bench.py")) if os.path.exists(path))
        documented = set(re.findall(r"--mode ([a-z]+)", read(bench).split('"""')[1]))
        self.assertIn("idle", documented)
        shown = subprocess.run([sys.executable, bench, "--help"], capture_output=True, text=True, timeout=GUARD).stdout
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
