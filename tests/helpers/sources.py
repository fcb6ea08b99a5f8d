"""The project's Python files, each parsed once per run: the structure, style and figures checks read the same trees."""

from __future__ import annotations

import ast
import functools
import os


@functools.cache
def _parsed(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as handle:
        return ast.parse(handle.read())


def parsed(path: str) -> ast.Module:
    """The syntax tree of the file at `path`, shared by every check that asks (callers read it, never change it)."""
    return _parsed(os.path.normpath(os.path.abspath(path)))


@functools.cache
def _walked(path: str) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_parsed(path)))


def walked(path: str) -> tuple[ast.AST, ...]:
    """Every node of the file at `path` in `ast.walk` order, walked once: a walk costs more than reading a tuple."""
    return _walked(os.path.normpath(os.path.abspath(path)))
