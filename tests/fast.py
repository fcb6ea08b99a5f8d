"""The fast tier: the tests that run wholly inside this process, in a few seconds.

`python3 -m tests.fast` runs them alone (the command to run after each edit); the full
suite, `python3 -m unittest discover`, runs them first, then everything else. In both, a
fast-tier test that starts a process or creates a socket fails on the spot: while the tier
runs, `subprocess`, `os.fork`, `os.posix_spawn`, `os.system` and `socket.socket` raise
`LeftTheProcess`. A test that needs a real peer (a server process, a socket, Chromium,
PostgreSQL) belongs to the rest of the suite; a class listed here that starts to need one
fails until it is taken off `FAST`.

`FAST` names whole modules, or classes of a module whose other classes start processes. It
holds the tests that work in memory: those over a SQLite file or a Markdown folder also stay
in the process, but they wait on the disk (each commit is synced), so they run with the rest.
A module with module-level fixtures (`setUpModule`) is not split: its fixture would run twice.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import unittest
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

__all__ = [
    "FAST",
    "GATES",
    "GuardedSuite",
    "LeftTheProcess",
    "in_fast_tier",
    "load",
    "main",
    "outside_the_process_refused",
    "split",
]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FAST = (
    # whole modules
    "test_checkpoints",
    "test_confirmation",
    "test_envelope",
    "test_lesson",
    "test_move_page",
    "test_notifications",
    "test_request_state",
    "test_scope",
    "test_wire_values",
    # the in-memory classes of modules whose other classes start servers or use files
    "test_browser_confirm.FirstCallTests",
    "test_browser_confirm.ModelCannotApproveTests",
    "test_browser_confirm.PageTests",
    "test_browser_confirm.SecondCallTests",
    "test_browser_confirm.UrlModeTests",
    "test_config.CommandLineTests",
    "test_config.EnvironmentTests",
    "test_conformance_fixtures.CompletionTests",
    "test_conformance_fixtures.HeaderTests",
    "test_conformance_fixtures.InputRequiredTests",
    "test_conformance_fixtures.LegacyEraToolTests",
    "test_conformance_fixtures.PlainToolTests",
    "test_conformance_fixtures.PromptTests",
    "test_conformance_fixtures.ResourceTests",
    "test_connect.AtMostOnce",
    "test_connect.CapabilityTests",
    "test_connect.DisconnectTests",
    "test_connect.LimitTests",
    "test_connect.LoginCsrfTests",
    "test_connect.PageBindingTests",
    "test_connect.ReadablePageTests",
    "test_connect.RefusalPageTests",
    "test_connect.RetryTests",
    "test_connect.ScopeTests",
    "test_connect.SecretTests",
    "test_connect.UrlElicitationTests",
    "test_docs.FrontPageTests",
    "test_docs.ImageTests",
    "test_docs.LinkTests",
    "test_docs.MermaidTests",
    "test_docs.ProjectFilesTests",
    "test_docs.RecordedFiguresTests",
    "test_first_run.MetaErrorTests",
    "test_folder_index.Bounds",
    "test_hidden_text.FormAndPage",
    "test_hidden_text.TheTable",
    "test_legacy.DualEraTests",
    "test_legacy.LegacyCancellationTests",
    "test_legacy.LegacyClientAnswerTests",
    "test_legacy.LegacyForwardingTests",
    "test_legacy.LegacyHandshakeTests",
    "test_legacy.LegacyLimitsTests",
    "test_legacy.LegacyLiveRequestTests",
    "test_legacy.LegacyLoggingTests",
    "test_legacy.LegacyProgressTests",
    "test_legacy.LegacyRootsTests",
    "test_legacy.LegacyShapeTests",
    "test_legacy.LegacySubscriptionTests",
    "test_legacy.LegacyToolsTests",
    "test_legacy.LegacyUrlModeTests",
    "test_legacy.LegacyWithoutElicitationTests",
    "test_lesson_shape.FileShape",
    "test_lesson_shape.ProductUsesTheLesson",
    "test_lesson_shape.ReadingOrder",
    "test_lesson_shape.ShippedSkill",
)


class LeftTheProcess(BaseException):
    """A fast-tier test tried to start a process or create a socket.

    A BaseException, so that code under test catching OSError or Exception cannot swallow it.
    """


def _refuse(what: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise LeftTheProcess(
            f"a fast-tier test must stay in its process, but it called {what}; move it out of tests/fast.py FAST"
        )

    return refused


# Every way the standard library starts a process or opens a socket passes through one of these.
GATES = (
    (subprocess.Popen, "_execute_child", "subprocess"),
    (os, "fork", "os.fork"),
    (os, "forkpty", "os.forkpty"),
    (os, "posix_spawn", "os.posix_spawn"),
    (os, "posix_spawnp", "os.posix_spawnp"),
    (os, "system", "os.system"),
    (socket.socket, "__init__", "socket.socket"),
)


@contextmanager
def outside_the_process_refused() -> Iterator[None]:
    """While inside: starting a process or creating a socket raises LeftTheProcess, in every thread."""
    with ExitStack() as stack:
        for owner, name, what in GATES:
            if hasattr(owner, name):
                stack.enter_context(mock.patch.object(owner, name, _refuse(what)))
        yield


class GuardedSuite(unittest.TestSuite):
    """A suite whose tests (and their class fixtures) run with processes and sockets refused."""

    def run(self, result: unittest.TestResult, debug: bool = False) -> unittest.TestResult:
        with outside_the_process_refused():
            return super().run(result, debug)


def _cases(suite: unittest.TestSuite | unittest.TestCase) -> Iterator[unittest.TestCase]:
    if isinstance(suite, unittest.TestSuite):
        for item in suite:
            yield from _cases(item)
    else:
        yield suite


def in_fast_tier(test: unittest.TestCase) -> bool:
    """True when `FAST` names the test's module or its class."""
    module = type(test).__module__.removeprefix("tests.")
    return module in FAST or f"{module}.{type(test).__qualname__}" in FAST


def split(tests: Iterable[unittest.TestCase]) -> tuple[list[unittest.TestCase], list[unittest.TestCase]]:
    """(the fast tier's tests, the rest), each in the order given."""
    fast: list[unittest.TestCase] = []
    rest: list[unittest.TestCase] = []
    for test in tests:
        (fast if in_fast_tier(test) else rest).append(test)
    return fast, rest


def load(suite: unittest.TestSuite) -> unittest.TestSuite:
    """`suite` reordered: the fast tier first, guarded, then the rest as discovered."""
    fast, rest = split(_cases(suite))
    return unittest.TestSuite([GuardedSuite(fast), unittest.TestSuite(rest)])


def main(argv: list[str] | None = None) -> int:
    """Run the fast tier alone; print its count and its time; the exit status."""
    started, cpu = time.monotonic(), time.process_time()
    names = [f"tests.{name}" for name in FAST]
    suite = GuardedSuite(list(_cases(unittest.TestLoader().loadTestsFromNames(names))))
    verbosity = 2 if "-v" in (argv if argv is not None else sys.argv[1:]) else 1
    result = unittest.TextTestRunner(verbosity=verbosity).run(suite)
    spent = f"{time.monotonic() - started:.1f} s ({time.process_time() - cpu:.1f} s CPU), loading included"
    print(f"fast tier: {result.testsRun} tests in {spent}; no process started, no socket opened", file=sys.stderr)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
