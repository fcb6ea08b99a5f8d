"""Run the suite (or the named modules) and say where its CPU time goes, by test, class and module.

`python3 -m tests.timings` runs what `python3 -m unittest discover` runs, then prints the
CPU seconds (user + system, this process and every child it waited for) of the top modules,
classes and tests. A class's set-up and tear-down count for that class (a server started once
per class is paid there, and a child's CPU is counted when it is reaped). CPU, not wall time:
on a shared machine the wall time measures the neighbours as much as the suite.
`python3 -m tests.timings tests.test_http` times one module; `--top N` sets the list length.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import unittest
import unittest.suite
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Ledger", "cpu_seconds", "main"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds() -> float:
    """User + system CPU of this process and of every child it has waited for so far."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


_started = [0]  # processes started through subprocess so far


def _counting(execute_child: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        _started[0] += 1
        return execute_child(*args, **kwargs)

    return counted


def child_seconds() -> float:
    """User + system CPU of the children this process has waited for so far."""
    times = os.times()
    return times.children_user + times.children_system


class Ledger:
    """CPU and wall seconds per owner ("module.Class.test", or "module.Class" for its fixtures)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.children: dict[str, float] = defaultdict(float)
        self.processes: dict[str, int] = defaultdict(int)
        self._open: list[list[float]] = []

    def start(self) -> list[float]:
        """Open a charge; `stop` closes it. A charge opened inside another is not charged to the outer one too."""
        frame = [cpu_seconds(), child_seconds(), time.monotonic(), float(_started[0]), 0.0, 0.0, 0.0, 0.0]
        self._open.append(frame)
        return frame

    def stop(self, owner: str, frame: list[float]) -> None:
        """Charge what was spent since `frame` was opened to `owner`, less what inner charges took."""
        self._open.remove(frame)
        spent = [
            cpu_seconds() - frame[0],
            child_seconds() - frame[1],
            time.monotonic() - frame[2],
            _started[0] - frame[3],
        ]
        if self._open:  # the enclosing charge must not count this again
            outer = self._open[-1]
            for index, amount in enumerate(spent):
                outer[4 + index] += amount
        cpu, children, wall, processes = (amount - inner for amount, inner in zip(spent, frame[4:], strict=True))
        self.cpu[owner] += cpu
        self.children[owner] += children
        self.wall[owner] += wall
        self.processes[owner] += int(processes)

    @contextmanager
    def charge(self, owner: str) -> Iterator[None]:
        """Charge the CPU and wall time spent inside the block to `owner`."""
        started = self.start()
        try:
            yield
        finally:
            self.stop(owner, started)

    def totals(self, depth: int) -> list[tuple[str, float, float, float, float]]:
        """(name, cpu, children's cpu, wall, processes started) summed over the first `depth` dotted parts of each
        owner, most CPU first."""
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        for owner, seconds in self.cpu.items():
            row = sums[".".join(owner.removeprefix("tests.").split(".")[:depth])]
            row[0] += seconds
            row[1] += self.children[owner]
            row[2] += self.wall[owner]
            row[3] += self.processes[owner]
        return sorted(((key, row[0], row[1], row[2], row[3]) for key, row in sums.items()), key=lambda row: -row[1])


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _instrument(ledger: Ledger) -> list[tuple[Any, str, Any]]:
    """Wrap the suite's class and module fixtures so their time is charged to their class or module."""
    suite = unittest.suite.TestSuite
    saved = [
        (suite, name, getattr(suite, name))
        for name in ("_handleClassSetUp", "_tearDownPreviousClass", "_handleModuleFixture", "_handleModuleTearDown")
    ]

    def class_setup(self: Any, test: Any, result: Any, _orig: Callable[..., Any] = saved[0][2]) -> Any:
        with ledger.charge(_name(test.__class__)):
            return _orig(self, test, result)

    def class_teardown(self: Any, test: Any, result: Any, _orig: Callable[..., Any] = saved[1][2]) -> Any:
        previous = getattr(result, "_previousTestClass", None)
        with ledger.charge(_name(previous) if previous is not None else "(none)"):
            return _orig(self, test, result)

    def module_setup(self: Any, test: Any, result: Any, _orig: Callable[..., Any] = saved[2][2]) -> Any:
        with ledger.charge(test.__class__.__module__ + ".(module)"):
            return _orig(self, test, result)

    def module_teardown(self: Any, result: Any, _orig: Callable[..., Any] = saved[3][2]) -> Any:
        previous = getattr(result, "_previousTestClass", None)
        with ledger.charge((previous.__module__ if previous is not None else "(none)") + ".(module)"):
            return _orig(self, result)

    suite._handleClassSetUp = class_setup  # type: ignore[attr-defined]  # a private unittest hook, not in typeshed
    suite._tearDownPreviousClass = class_teardown  # type: ignore[attr-defined]  # a private unittest hook, not in typeshed
    suite._handleModuleFixture = module_setup  # type: ignore[attr-defined]  # a private unittest hook, not in typeshed
    suite._handleModuleTearDown = module_teardown  # type: ignore[attr-defined]  # a private unittest hook, not in typeshed
    return saved


def _timed_result(ledger: Ledger) -> type[unittest.TextTestResult]:
    class TimedResult(unittest.TextTestResult):
        """Charges each test's own run (set-up, body, tear-down, cleanups) to it."""

        def startTest(self, test: unittest.TestCase) -> None:
            self._started = ledger.start()
            super().startTest(test)

        def stopTest(self, test: unittest.TestCase) -> None:
            super().stopTest(test)
            ledger.stop(test.id(), self._started)

    return TimedResult


def main(argv: list[str] | None = None) -> int:
    """Run the named test modules (default: discover from the root), print the top CPU costs; the exit status."""
    parser = argparse.ArgumentParser(prog="python3 -m tests.timings", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="test modules, classes or tests (default: the whole suite)")
    parser.add_argument("--top", type=int, default=15, help="rows in each list (default 15)")
    parser.add_argument("--all", metavar="FILE", help="also write every test's figures to FILE (tab-separated)")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    ledger = Ledger()
    start_cpu, start_wall = cpu_seconds(), time.monotonic()
    loader = unittest.TestLoader()
    with ledger.charge("(loading)"):
        suite = loader.loadTestsFromNames(args.names) if args.names else loader.discover(ROOT)
    saved = _instrument(ledger)
    saved.append((subprocess.Popen, "_execute_child", subprocess.Popen._execute_child))  # type: ignore[attr-defined]
    subprocess.Popen._execute_child = _counting(subprocess.Popen._execute_child)  # type: ignore[attr-defined]
    try:
        runner = unittest.TextTestRunner(resultclass=_timed_result(ledger), verbosity=0, stream=sys.stderr)
        result = runner.run(suite)
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
    total_cpu, total_wall = cpu_seconds() - start_cpu, time.monotonic() - start_wall
    print(
        f"\n{result.testsRun} tests: {total_cpu:.1f} s CPU (user+sys, children included), {total_wall:.1f} s wall,"
        f" {_started[0]} processes started, load {os.getloadavg()[0]:.1f}"
    )
    for title, depth in (("modules", 1), ("classes", 2), ("tests", 3)):
        print(f"\ntop {args.top} {title}: CPU s, of it in child processes, wall s, processes started")
        for name, cpu, children, wall, processes in ledger.totals(depth)[: args.top]:
            print(f"  {cpu:7.2f} {children:7.2f} {wall:7.2f} {processes:5.0f}  {name}")
    if args.all:
        with open(args.all, "w", encoding="utf-8") as handle:
            for name, cpu, children, wall, processes in ledger.totals(3):
                handle.write(f"{cpu:.3f}\t{children:.3f}\t{wall:.3f}\t{processes:.0f}\t{name}\n")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
