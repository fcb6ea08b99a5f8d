"""outputs/walkthrough.html: regenerated from main.py, the lesson's tests and the demo, and read in a real browser."""

from __future__ import annotations

import html.parser
import os
import re
import sys
import tempfile
import threading
import unittest
from typing import Any

from helpers import (
    support,  # first: it puts code/ and code/scripts/ on the import path
    webdriver,  # noqa: E402
)

import main  # noqa: E402
import walkthrough  # noqa: E402

# Where the page's screenshot goes: a scratch folder, so a run never changes the checkout;
# `NOTES_MCP_SCREENSHOTS=docs/img python3 -m unittest tests.test_walkthrough` writes it there instead.
SCREENSHOTS = os.environ.get("NOTES_MCP_SCREENSHOTS") or os.path.join(tempfile.gettempdir(), "notes-mcp-screenshots")
load_tests = webdriver.load_tests_for(__file__)  # the run's one browser is kept open for this module's tests
WINDOW = (1280, 900)  # a desktop browser's, as the page's screenshot in the docs shows it


class Links(html.parser.HTMLParser):
    """Every element id, every href, and each tag name the page uses."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.hrefs: list[str] = []
        self.tags: set[str] = set()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            if name == "id" and value:
                self.ids.append(value)
            elif name == "href" and value:
                self.hrefs.append(value)
            elif name == "src" and value:
                self.sources.append(value)


def committed() -> str:
    with open(walkthrough.PAGE, encoding="utf-8") as handle:
        return handle.read()


def parsed(page: str) -> Links:
    links = Links()
    links.feed(page)
    return links


class Regenerated(unittest.TestCase):
    def test_the_committed_page_is_exactly_what_the_script_writes_from_the_code_the_tests_and_the_demo(self) -> None:
        self.assertEqual(
            committed(),
            walkthrough.render(),
            "outputs/walkthrough.html is stale: run python3 code/scripts/walkthrough.py",
        )

    def test_each_heading_in_order_links_to_its_first_line_and_every_line_of_main_py_has_an_anchor(self) -> None:
        page = committed()
        with open(os.path.join(support.CODE, "main.py"), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        banners = [
            (k, m.group(1), m.group(2))
            for k, line in enumerate(lines, start=1)
            if (m := walkthrough.BANNER.match(line))
        ]
        headings = re.findall(r'<h2><a href="#L(\d+)">(\d+)\. (.+?)</a></h2>', page)
        self.assertEqual(
            [(int(line), number, title.replace("&#x27;", "'")) for line, number, title in headings],
            [(line, number, title) for line, number, title in banners],
        )
        self.assertEqual(len(headings), 15)
        ids = parsed(page).ids
        self.assertEqual(sorted(int(i[1:]) for i in ids if re.fullmatch(r"L\d+", i)), list(range(1, len(lines) + 1)))
        self.assertEqual(len(ids), len(set(ids)))  # every anchor unique
        for href in parsed(page).hrefs:
            with self.subTest(href=href):
                if href.startswith("#"):
                    self.assertIn(href[1:], ids)  # no link points nowhere
                else:
                    self.assertTrue(os.path.exists(os.path.join(support.ROOT, "outputs", href)), href)

    def test_the_page_is_plain_html_and_css_with_no_script_and_nothing_loaded_from_elsewhere(self) -> None:
        page = committed()
        links = parsed(page)
        self.assertNotIn("script", links.tags)
        self.assertEqual(links.sources, [])
        self.assertEqual([href for href in links.hrefs if "://" in href or href.startswith("//")], [])
        (style,) = re.findall(r"<style>(.*?)</style>", page, re.DOTALL)
        self.assertNotIn("@import", style)
        self.assertNotIn("url(", style)  # no font, image or sheet fetched by the CSS
        self.assertEqual(page.count("<style"), 1)

    def test_each_demo_step_is_shown_under_every_heading_its_title_names(self) -> None:
        page = committed()
        sections = dict(re.findall(r'<section id="section-(\d+)">(.*?)</section>', page, re.DOTALL))
        self.assertIn("## 1. server/discover", sections["12"])
        self.assertIn("## 2. tools/list", sections["13"])
        self.assertIn("## 3. tools/call, id 1", sections["3"])
        self.assertIn("## The user sees the form", sections["5"])
        self.assertIn("## 5. tools/call, id 3", sections["8"])
        self.assertIn("## 6. tools/call", sections["6"])
        self.assertIn("Notes server demo", sections["15"])
        self.assertNotIn("## 1. server/discover", sections["8"])
        self.assertIsNone(
            re.search(r"v1\.[0-9a-f]{8}\.…\(\d+ chars", page)
        )  # the per-run state is shown without its value

    def test_every_test_listed_for_a_heading_runs_lines_of_that_heading(self) -> None:
        # Traced, not trusted: each listed test, run alone, must execute at least one line
        # of the section it is said to prove.
        with open(os.path.join(support.CODE, "main.py"), encoding="utf-8") as handle:
            found = walkthrough.sections(handle.read().splitlines())
        spans = {s.number: range(s.first, s.last + 1) for s in found}
        import test_checkpoints
        import test_lesson

        cases = {
            case.id().rsplit(".", 1)[-1]: case
            for module in (test_checkpoints, test_lesson)
            for case in flatten(unittest.defaultTestLoader.loadTestsFromModule(module))
        }
        for number, names in walkthrough.PROOFS.items():
            for name in names:
                with self.subTest(section=number, test=name):
                    ran = traced_lines(cases[name])
                    self.assertTrue(ran & set(spans[number]), f"{name} runs no line of section {number}")


def flatten(suite: unittest.TestSuite | unittest.TestCase) -> list[unittest.TestCase]:
    """Every test case in a suite, however nested."""
    if isinstance(suite, unittest.TestCase):
        return [suite]
    return [case for part in suite for case in flatten(part)]


def traced_lines(case: unittest.TestCase) -> set[int]:
    """The lines of main.py that one test executes, on every thread it starts."""
    target = os.path.realpath(main.__file__)
    ran: set[int] = set()

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            ran.add(frame.f_lineno)
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if os.path.realpath(frame.f_code.co_filename) == target:
            ran.add(frame.f_lineno)
            return local
        return None

    result = unittest.TestResult()
    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        case.run(result)
    finally:
        sys.settrace(None)
        threading.settrace(None)
    assert result.wasSuccessful(), result.failures + result.errors
    return ran


class InTheBrowser(unittest.TestCase):
    """The page in a real headless Chromium with JavaScript off: every heading's link leads to its code."""

    @classmethod
    def setUpClass(cls) -> None:
        if not webdriver.available():
            raise unittest.SkipTest("Chromium or chromedriver not installed (run .ci/setup-chromium.sh)")

    def test_each_heading_and_contents_link_leads_to_its_section_and_first_line_with_javascript_off(self) -> None:
        driver = webdriver.shared(self, javascript=False, window=WINDOW)
        url = "file://" + walkthrough.PAGE
        driver.get(url)
        os.makedirs(SCREENSHOTS, exist_ok=True)
        with open(os.path.join(SCREENSHOTS, "walkthrough.png"), "wb") as handle:
            handle.write(driver.screenshot())
        top = driver.view()
        with open(os.path.join(support.CODE, "main.py"), encoding="utf-8") as handle:
            found = walkthrough.sections(handle.read().splitlines())
        for section in found:
            with self.subTest(section=section.number):
                driver.click(f'nav a[href="#section-{section.number}"]')
                self.assertEqual(driver.current_url(), f"{url}#section-{section.number}")
                heading = f"#section-{section.number} h2 a"
                self.assertIn(section.title, driver.text(driver.find(heading)))
                driver.click(heading)
                self.assertEqual(driver.current_url(), f"{url}#L{section.first}")
                line = driver.find(f"#L{section.first}")
                self.assertEqual(driver.text(line), str(section.first))
                self.assertNotEqual(driver.view(), top)  # the view moved to the section
        with open(os.path.join(SCREENSHOTS, "walkthrough-section-10.png"), "wb") as handle:
            driver.get(f"{url}#section-10")
            handle.write(driver.screenshot())


if __name__ == "__main__":
    unittest.main()
