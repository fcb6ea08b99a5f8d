"""The style's checkers: ruff and mypy pinned in pyproject.toml, configured there, run by .ci/run before the tests.

Nothing here imports either tool: the checks read the configuration and the CI script as text.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
import tomllib
import unittest
from typing import Any

from helpers import support

TOOLS = frozenset({"ruff", "mypy"})  # the development tools nothing may import
RULE_FAMILIES = {"E", "F", "W", "I", "B", "UP"}
LINE_LENGTH = 120
SWITCHES_OFF = ("ignore_errors", "disable_error_code", "ignore_missing_imports", "follow_imports")
# A suppression comment must name what it suppresses: type-ignore with [its-code], noqa with its rule codes.
BARE_SUPPRESSION = re.compile(r"#\s*(type:\s*ignore(?!\[)|noqa(?!:))")


def pyproject() -> dict[str, Any]:
    """pyproject.toml, parsed."""
    with open(os.path.join(support.ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)


def ci_lines() -> list[str]:
    """The commands of .ci/run, comments and blank lines left out."""
    with open(os.path.join(support.ROOT, ".ci", "run"), encoding="utf-8") as handle:
        lines = [line.split("  #")[0].strip() for line in handle]
    return [line for line in lines if line and not line.startswith("#")]


def python_files() -> list[str]:
    """Every .py file under code/ and tests/, relative to the checkout."""
    found = []
    for top in ("code", "tests"):
        for folder, _, names in os.walk(os.path.join(support.ROOT, top)):
            found += [os.path.relpath(os.path.join(folder, n), support.ROOT) for n in names if n.endswith(".py")]
    return sorted(found)


def imported_top_names(source: str, among: frozenset[str] | None = None) -> set[str]:
    """The top-level names of every module `source` imports.

    With `among`, only those names are asked for: a source whose text holds none of them
    cannot import one, so it is not parsed (most files are not), and the answer is the empty set.
    """
    if among is not None and not any(name in source for name in among):
        return set()
    tree = ast.parse(source)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.partition(".")[0])
    return names


def bare_suppressions(source: str) -> list[int]:
    """The line of each comment in `source` that suppresses a check without naming it.

    Only a source whose text matches the pattern anywhere is tokenized (a comment is part of
    the text), so the many files without one cost a regular-expression search, not a tokenizer run.
    """
    if not BARE_SUPPRESSION.search(source):
        return []
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [t.start[0] for t in tokens if t.type == tokenize.COMMENT and BARE_SUPPRESSION.search(t.string)]


class PinnedTools(unittest.TestCase):
    """ruff and mypy are development tools at exact versions; the runtime needs neither."""

    def test_the_dev_extra_pins_exact_ruff_and_mypy_versions_and_the_runtime_needs_no_package(self) -> None:
        project = pyproject()["project"]
        dev = project["optional-dependencies"]["dev"]
        for tool in ("ruff", "mypy"):
            with self.subTest(tool=tool):
                pins = [d for d in dev if d.startswith(tool + "==")]
                self.assertEqual(len(pins), 1, dev)
                self.assertRegex(pins[0], r"^[a-z]+==\d+(\.\d+)+$")
        self.assertEqual(project["dependencies"], [])

    def test_no_module_of_code_or_tests_imports_ruff_or_mypy(self) -> None:
        for path in python_files():
            with open(os.path.join(support.ROOT, path), encoding="utf-8") as handle:
                source = handle.read()
            with self.subTest(path=path):
                self.assertFalse(TOOLS & imported_top_names(source, among=TOOLS))

    def test_the_import_finder_sees_an_import_of_a_tool_however_it_is_spelled(self) -> None:
        source = "import os\ndef f():\n    from mypy.api import run\n    import ruff as linter\n"
        self.assertEqual(imported_top_names(source), {"os", "mypy", "ruff"})
        self.assertEqual(imported_top_names(source, among=TOOLS), {"os", "mypy", "ruff"})
        self.assertEqual(imported_top_names("import os\n", among=TOOLS), set())


class RuffConfiguration(unittest.TestCase):
    """The linter holds 120 columns and the rule families a reviewer applies, over code/ and tests/."""

    def test_ruff_holds_120_columns_the_rule_families_and_code_and_tests(self) -> None:
        ruff = pyproject()["tool"]["ruff"]
        self.assertEqual(ruff["line-length"], LINE_LENGTH)
        self.assertEqual(set(ruff["lint"]["select"]), RULE_FAMILIES)
        self.assertNotIn("ignore", ruff["lint"])
        self.assertNotIn("extend-ignore", ruff["lint"])
        self.assertNotIn("per-file-ignores", ruff["lint"])
        self.assertEqual(ruff["include"], ["code/**/*.py", "tests/**/*.py"])


class MypyConfiguration(unittest.TestCase):
    """The type checker reads every file of code/ and tests/ and switches no error off."""

    def test_mypy_checks_code_and_tests_and_switches_off_nothing_but_the_untyped_postgres_driver(self) -> None:
        mypy = pyproject()["tool"]["mypy"]
        self.assertEqual(mypy["files"], ["code", "tests"])
        self.assertTrue(mypy["check_untyped_defs"])
        self.assertTrue(mypy["warn_unused_ignores"])
        for switch in SWITCHES_OFF:
            self.assertNotIn(switch, mypy)
        for override in mypy.get("overrides", []):
            with self.subTest(override=override["module"]):
                self.assertEqual(override["module"], ["psycopg", "psycopg.*"])
                self.assertEqual(set(override), {"module", "ignore_missing_imports"})

    def test_every_suppression_comment_names_the_code_it_suppresses(self) -> None:
        for path in python_files():
            with open(os.path.join(support.ROOT, path), encoding="utf-8") as handle:
                source = handle.read()
            with self.subTest(path=path):
                self.assertEqual(bare_suppressions(source), [])

    def test_the_suppression_finder_sees_a_bare_comment_but_not_one_in_a_string_or_one_naming_its_code(self) -> None:
        source = (
            "x = f()  # type: ignore\n"
            "y = g()  # noqa\n"
            "z = h()  # type: ignore[arg-type]  # noqa: E501\n"
            "text = '# type: ignore'\n"
        )
        self.assertEqual(bare_suppressions(source), [1, 2])
        self.assertEqual(bare_suppressions("text = '# noqa'\n"), [])


class ContinuousIntegration(unittest.TestCase):
    """.ci/run installs both pinned tools and runs them, from pyproject's configuration, before the tests."""

    def test_ci_runs_ruff_check_ruff_format_check_and_mypy_after_installing_them_and_before_the_tests(self) -> None:
        lines = ci_lines()
        order = [
            'sh .ci/setup-devtools.sh "$PY"',
            '"$PY" -m ruff check',
            '"$PY" -m ruff format --check',
            '"$PY" -m mypy',
            "exec python3 -m unittest discover -v",
        ]
        self.assertEqual([line for line in lines if line in order], order)

    def test_the_setup_reads_both_pins_from_the_dev_extra(self) -> None:
        with open(os.path.join(support.ROOT, ".ci", "setup-devtools.sh"), encoding="utf-8") as handle:
            script = handle.read()
        self.assertIn("for TOOL in mypy ruff; do", script)
        self.assertIn('["project"]["optional-dependencies"]["dev"]', script)
        self.assertIn('pip install --quiet "$PIN"', script)


if __name__ == "__main__":
    unittest.main()
