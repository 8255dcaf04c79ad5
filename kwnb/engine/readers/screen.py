"""Render a byte stream as a terminal would show it: `\\r` returns to the line start, `\\b` steps
back one column, later characters overwrite earlier ones.

Keras progress bars rewrite one line thousands of times with `\\r` and `\\b`, even into files;
shown raw they are a wall of fragments. This keeps only the last `keep` finished lines plus the
line being drawn, so memory stays flat however much a worker prints.
"""
from __future__ import annotations

import re
from collections import deque

from .lines import STYLING, unstyled

_CONTROL = re.compile(r"([\r\b])")


def overwrite(line: str, cursor: int, text: str) -> tuple[str, int]:
    """Write `text` at column `cursor` of `line`, as a terminal does."""
    if cursor >= len(line):
        return line + " " * (cursor - len(line)) + text, cursor + len(text)
    return line[:cursor] + text + line[cursor + len(text):], cursor + len(text)


def render_line(raw: str, line: str = "", cursor: int = 0) -> tuple[str, int]:
    """Apply one stretch of output without newlines to a line being drawn."""
    raw = unstyled(raw)  # colours and bold (Keras 3's bar) are not drawn as text
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
        finished = self.feed_text(text)
        return [line.rstrip() for line in finished.split("\n")[:-1]] if finished else []

    def feed_text(self, text: str) -> str:
        """Add output; returns the lines it finished, rendered, each ended by `\n` (trailing spaces
        not yet stripped): one string, for callers that look at a few lines of a large burst.

        A burst of plain lines (no `\r`, `\b` or escape, as most of a chatty log) is never split into
        one string per line: only the `keep` last are made. That took the screen's share of the
        kernel's cost from 0.039 to ~0.004 CPU-s per 100k lines (benchmarks/README.md, section 3)."""
        text, self._held = self._held + text, ""
        start = text.rfind("\x1b", max(0, len(text) - 32))
        if start >= 0 and not STYLING.match(text, start):
            text, self._held = text[:start], text[start:]
        end = text.rfind("\n")
        if end >= 0:
            body, text = text[:end + 1], text[end + 1:]
            plain = self._cursor == len(self.current) and not any(c in body for c in "\r\b\x1b")
            finished = self._finish_plain(body) if plain else self._finish_drawn(body)
            self.current, self._cursor = "", 0
        else:
            finished = ""
        if text:
            self.current, self._cursor = render_line(text, self.current, self._cursor)
        return finished

    def _finish_plain(self, body: str) -> str:
        """Lines as written, the line being drawn first: only the last `keep` are split out."""
        finished = self.current + body
        count = body.count("\n")
        keep = self.lines.maxlen  # None: unbounded (Run.logs reads every line)
        if keep is None or count <= keep:
            kept = finished.split("\n")[:-1]
        else:  # the first piece holds every older line, the last is the empty one after the last `\n`
            kept = finished.rsplit("\n", keep + 1)[1:-1]
        self.lines.extend(line.rstrip() for line in kept)
        self.total_lines += count
        return finished

    def _finish_drawn(self, body: str) -> str:
        """Lines with `\r`, `\b` or escapes in them, rendered one by one."""
        finished = []
        for part in body.split("\n")[:-1]:
            if part or self.current:
                line, _ = render_line(part, self.current, self._cursor) if part else (self.current, 0)
            else:
                line = ""
            finished.append(line.rstrip())
            self.current, self._cursor = "", 0
        self.lines.extend(finished)
        self.total_lines += len(finished)
        return "".join(line + "\n" for line in finished)

    def finish(self) -> str:
        """End the line being drawn, as a newline would (its writer has ended); returns it as feed_text does."""
        if not self.current.strip():  # nothing shown: nothing to end (tail and total_lines skip it too)
            return ""
        return self.feed_text("\n")

    def tail(self, count: int | None = None) -> list[str]:
        """The last lines on screen, the unfinished one included."""
        shown = list(self.lines) + ([self.current.rstrip()] if self.current.strip() else [])
        return shown if count is None else shown[-count:]

    @property
    def hidden_lines(self) -> int:
        return self.total_lines - len(self.lines)
