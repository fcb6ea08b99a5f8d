"""Server processes shared by the tests of a class or of a whole module: started at the first test that asks, started
again when a test left the one before dead, stopped when the class or module is done."""

from __future__ import annotations

import unittest
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from helpers import procs

__all__ = ["ModuleScope", "Shared"]

P = TypeVar("P", bound=procs.Process)


class ModuleScope:
    """Like procs.ClassScope, for a module: what it is asked to clean up is cleaned up once the module's tests ran."""

    def addCleanup(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        unittest.addModuleCleanup(function, *args, **kwargs)

    def fail(self, message: str) -> None:
        raise AssertionError(message)


class Shared(Generic[P]):
    """One process `start(scope)` makes, handed to every test that asks; one a test ended is started again."""

    def __init__(self, start: Callable[[Any], P]) -> None:
        self.start = start
        self.process: P | None = None

    def get(self, scope: Any) -> P:
        """The running process, started (its cleanups given to `scope`) when there is none or it has exited."""
        if self.process is None or self.process.proc.poll() is not None:
            self.process = self.start(scope)
            scope.addCleanup(self.forget)  # runs before the process's own stop (cleanups run last-in, first-out)
        return self.process

    def forget(self) -> None:
        """The scope is done: the next ask starts a new process."""
        self.process = None
