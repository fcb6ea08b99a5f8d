"""The fast tier (tests/fast.py): what it holds, that it stays in its process, and that the full suite runs it first."""

from __future__ import annotations

import ast
import importlib
import os
import socket
import subprocess
import unittest
from typing import cast

from helpers import support

from tests import fast, timings


def outcome(body: object) -> unittest.TestResult:
    """Run a one-test class whose test calls `body` inside the fast tier's guard; its result."""

    class Probe(unittest.TestCase):
        def test_probe(self) -> None:
            body()  # type: ignore[operator]

    result = unittest.TestResult()
    fast.GuardedSuite([Probe("test_probe")]).run(result)
    return result


def swallowing(call: object) -> object:
    """A body that calls `call` and hides any Exception, as careless code under test might."""

    def body() -> None:
        try:
            call()  # type: ignore[operator]
        except Exception:  # noqa: BLE001 - the point: the guard's refusal is not an Exception
            pass

    return body


def module_fixtures(source: str) -> set[str]:
    """The module-level fixtures (`setUpModule`, `tearDownModule`) a test module's `source` binds at its top level.

    A source whose text names neither cannot bind one, so it is not parsed (most are not).
    """
    fixtures = {"setUpModule", "tearDownModule"}
    if not any(name in source for name in fixtures):
        return set()
    tree = ast.parse(source)
    bound = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for leaf in node.targets
        for target in ast.walk(leaf)
        if isinstance(target, ast.Name)
    }
    bound |= {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    return bound & fixtures


class FastTierMembers(unittest.TestCase):
    """`FAST` names real test modules and classes, none with module-level fixtures."""

    def test_every_name_in_the_fast_tier_is_a_test_module_or_a_test_class_of_this_folder(self) -> None:
        self.assertGreater(len(fast.FAST), 0)
        self.assertEqual(len(set(fast.FAST)), len(fast.FAST))
        for name in fast.FAST:
            with self.subTest(name=name):
                module_name, _, class_name = name.partition(".")
                self.assertTrue(module_name.startswith("test_"))
                module = importlib.import_module("tests." + module_name)
                if class_name:
                    self.assertTrue(issubclass(getattr(module, class_name), unittest.TestCase))
                    self.assertNotIn(module_name, fast.FAST)  # a whole module is not also listed by class

    def test_no_module_in_the_fast_tier_has_module_level_fixtures(self) -> None:
        # A module split between the tiers would run its setUpModule twice; and those the
        # suite has start PostgreSQL, a process.
        for module_name in sorted({name.partition(".")[0] for name in fast.FAST}):
            with self.subTest(module=module_name):
                with open(os.path.join(support.ROOT, "tests", module_name + ".py"), encoding="utf-8") as handle:
                    source = handle.read()
                self.assertEqual(module_fixtures(source), set())

    def test_the_fixture_finder_sees_a_module_fixture_defined_or_assigned_but_not_a_class_s(self) -> None:
        self.assertEqual(module_fixtures("def setUpModule():\n    pass\n"), {"setUpModule"})
        self.assertEqual(module_fixtures("tearDownModule = shared.stop\n"), {"tearDownModule"})
        self.assertEqual(module_fixtures("class T:\n    def setUpModule(self):\n        pass\n"), set())
        self.assertEqual(module_fixtures("# no setUpModule here\nx = 1\n"), set())


class StaysInItsProcess(unittest.TestCase):
    """Inside the fast tier, starting a process or creating a socket fails the test that does it."""

    def test_starting_a_process_or_opening_a_socket_fails_the_test_and_names_the_call(self) -> None:
        calls = [
            ("subprocess", lambda: subprocess.run(["true"], check=False)),
            ("os.system", lambda: os.system("true")),
            ("socket.socket", socket.socket),
            ("socket.socket", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1)),
        ]
        for what, call in calls:
            with self.subTest(call=what):
                result = outcome(call)
                self.assertEqual((result.testsRun, len(result.errors), len(result.failures)), (1, 1, 0))
                self.assertIn(
                    f"LeftTheProcess: a fast-tier test must stay in its process, but it called {what}",
                    result.errors[0][1],
                )

    def test_code_that_catches_every_exception_cannot_hide_the_refusal(self) -> None:
        for call in (lambda: subprocess.run(["true"], check=False), socket.socket):
            result = outcome(swallowing(call))
            self.assertEqual(len(result.errors), 1)
            self.assertIn("LeftTheProcess", result.errors[0][1])

    def test_a_test_that_stays_in_its_process_passes(self) -> None:
        result = outcome(lambda: sorted(os.listdir(support.ROOT)))
        self.assertEqual((result.testsRun, result.errors, result.failures), (1, [], []))

    def test_every_gate_is_closed_inside_the_guard_and_open_again_after_it(self) -> None:
        gates = [(owner, name) for owner, name, _ in fast.GATES if hasattr(owner, name)]
        self.assertIn((os, "fork"), gates)
        self.assertIn((subprocess.Popen, "_execute_child"), gates)
        originals = [getattr(owner, name) for owner, name in gates]
        with fast.outside_the_process_refused():
            inside = [getattr(owner, name) for owner, name in gates]
        self.assertEqual([a is b for a, b in zip(inside, originals, strict=True)], [False] * len(gates))
        self.assertEqual(
            [getattr(owner, name) is original for (owner, name), original in zip(gates, originals, strict=True)],
            [True] * len(gates),
        )


class FullSuiteOrder(unittest.TestCase):
    """From the root, discovery runs the fast tier first, guarded, then the rest, and loses no test."""

    def discovered(self, pattern: str) -> tuple[list[str], list[str], int]:
        """(ids run guarded, ids run after them) as `discover` from the root loads the files matching `pattern`; the
        module's test count."""
        suite = unittest.TestLoader().discover(support.ROOT, pattern=pattern)
        (package,) = list(suite)  # what tests/__init__.py's load_tests returned
        assert isinstance(package, unittest.TestSuite)
        (split,) = list(package)
        assert isinstance(split, unittest.TestSuite)
        guarded, rest = list(split)
        assert isinstance(guarded, unittest.TestSuite) and isinstance(rest, unittest.TestSuite)
        self.assertIsInstance(guarded, fast.GuardedSuite)
        self.assertNotIsInstance(rest, fast.GuardedSuite)
        module = unittest.TestLoader().loadTestsFromName("tests." + pattern.removesuffix(".py"))
        # Both hold test cases only: a nested suite has no id() and would fail here.
        ids = [[cast(unittest.TestCase, test).id() for test in part] for part in (guarded, rest)]
        return ids[0], ids[1], module.countTestCases()

    def test_a_module_in_the_tier_runs_guarded_and_first(self) -> None:
        guarded, rest, total = self.discovered("test_scope.py")
        self.assertEqual((len(guarded), rest), (total, []))
        self.assertTrue(all(name.startswith("tests.test_scope.") for name in guarded))

    def test_a_module_split_between_the_tiers_runs_its_in_process_classes_first(self) -> None:
        guarded, rest, total = self.discovered("test_config.py")
        self.assertEqual(len(guarded) + len(rest), total)
        self.assertEqual({name.split(".")[2] for name in guarded}, {"CommandLineTests", "EnvironmentTests"})
        self.assertIn("SubprocessExitStatusTests", {name.split(".")[2] for name in rest})

    def test_a_module_outside_the_tier_runs_unguarded(self) -> None:
        guarded, rest, total = self.discovered("test_stdio.py")
        self.assertEqual((guarded, len(rest)), ([], total))


class SuiteTimings(unittest.TestCase):
    """`python3 -m tests.timings` charges a charge opened inside another to the inner owner only, and sums by module."""

    def test_an_inner_charge_is_not_counted_again_in_the_outer_one(self) -> None:
        ledger = timings.Ledger()
        before = timings._started[0]
        try:
            outer = ledger.start()
            inner = ledger.start()
            timings._started[0] += 2  # two processes started inside the inner charge
            ledger.stop("tests.test_x.A.test_inner", inner)
            timings._started[0] += 1  # and one by the outer owner itself
            ledger.stop("tests.test_x.A", outer)
        finally:
            timings._started[0] = before
        self.assertEqual(dict(ledger.processes), {"tests.test_x.A.test_inner": 2, "tests.test_x.A": 1})
        (module,) = ledger.totals(1)
        self.assertEqual((module[0], module[4]), ("test_x", 3))
        self.assertEqual(sorted(row[0] for row in ledger.totals(3)), ["test_x.A", "test_x.A.test_inner"])
        self.assertGreaterEqual(min(ledger.cpu.values()), 0.0)


if __name__ == "__main__":
    unittest.main()
