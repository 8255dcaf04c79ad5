"""Parsing a user's Python source into an AST, one parse at a time in this process.

CPython 3.11 keeps the AST constructor's recursion depth in state its threads share: two `ast.parse` at once (two
runs launched from threads, as the suite's captures and the corpus do) can fail with "SystemError: AST constructor
recursion depth mismatch" (python/cpython#106905; seen here on 3.11.7 with four launches at once). A parse takes
milliseconds, so a lock costs nothing that matters.
"""
from __future__ import annotations

import ast
import os
import threading

_ONE_AT_A_TIME = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse, serialised; raises what it raises (SyntaxError, ValueError for a NUL byte)."""
    with _ONE_AT_A_TIME:
        return ast.parse(source, filename)


def parse_file(path: str | os.PathLike) -> ast.Module | None:
    """A script's AST, or None where it cannot be read or is not Python (the launch-time hints then say nothing)."""
    try:
        with open(path, errors="replace") as source:
            return parse(source.read(), str(path))
    except (OSError, SyntaxError, ValueError):
        return None
