"""Render a byte stream as a terminal would show it: `\\r` returns to the line start, `\\b` steps
back one column, later characters overwrite earlier ones.

Keras progress bars rewrite one line thousands of times with `\\r` and `\\b`, even into files;
shown raw they are a wall of fragments. This keeps only the last `keep` finished lines plus the
line being drawn, so memory stays flat however much a worker prints.
"""
from __future__ import annotations

import re
from collections import deque

_CONTROL = re.compile(r"([\r\b])")
# Colour and cursor escape sequences (ESC [ ... letter): not drawn, so dropped from the rendering.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def overwrite(line: str, cursor: int, text: str) -> tuple[str, int]:
    """Write `text` at column `cursor` of `line`, as a terminal does."""
    if cursor >= len(line):
        return line + " " * (cursor - len(line)) + text, cursor + len(text)
    return line[:cursor] + text + line[cursor + len(text):], cursor + len(text)


def render_line(raw: str, line: str = "", cursor: int = 0) -> tuple[str, int]:
    """Apply one stretch of output without newlines to a line being drawn."""
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)
    if "\r" not in raw and "\b" not in raw:
        return overwrite(line, cursor, raw)
    for piece in _CONTROL.split(raw):
        if piece == "\r":
            cursor = 0
        elif piece == "\b":
            cursor = max(0, cursor - 1)
        elif piece:
            line, cursor = overwrite(line, cursor, piece)
    return line, cursor


class TerminalScreen:
    """The last lines of a stream as a terminal shows them, fed incrementally."""

    def __init__(self, keep: int = 300):
        self.lines: deque[str] = deque(maxlen=keep)
        self.total_lines = 0  # finished lines seen, including those no longer kept
        self.current = ""  # the line being drawn (no newline yet)
        self._cursor = 0
        self._held = ""  # an escape sequence cut by a read, completed by the next one

    def feed(self, text: str) -> list[str]:
        """Add output; returns the lines it finished (rendered), oldest first."""
        text, self._held = self._held + text, ""
        start = text.rfind("\x1b", max(0, len(text) - 32))
        if start >= 0 and not _ANSI.match(text, start):
            text, self._held = text[:start], text[start:]
        parts = text.split("\n")
        finished = []
        for part in parts[:-1]:
            if part or self.current:
                line, _ = render_line(part, self.current, self._cursor) if part else (self.current, 0)
            else:
                line = ""
            finished.append(line.rstrip())
            self.current, self._cursor = "", 0
        if parts[-1]:
            self.current, self._cursor = render_line(parts[-1], self.current, self._cursor)
        self.lines.extend(finished)
        self.total_lines += len(finished)
        return finished

    def tail(self, count: int | None = None) -> list[str]:
        """The last lines on screen, the unfinished one included."""
        shown = list(self.lines) + ([self.current.rstrip()] if self.current.strip() else [])
        return shown if count is None else shown[-count:]

    @property
    def hidden_lines(self) -> int:
        return self.total_lines - len(self.lines)


def render_file(path) -> list[str]:
    """A whole log file as a terminal shows it, line by line."""
    screen = TerminalScreen(keep=10**9)
    with open(path, "rb") as log:
        screen.feed(log.read().decode("utf-8", errors="replace"))
    return screen.tail()
