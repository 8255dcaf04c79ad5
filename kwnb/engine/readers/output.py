"""A task's output, read once: one reader per task turns the bytes of its log into finished lines and hands
each read's lines to the sinks chosen when it was made, as TensorFlow's multi_process_runner reads each
subprocess's stdout once and hands every line to the outputs it was built with (printed, queued, or both).

The reader itself keeps what views show: the last lines as a terminal shows them (Keras progress bars
redraw a line with `\\r` and `\\b`, even into files: screen.py renders them) and which of them are
TensorFlow's runtime lines. That decision (tf_messages.is_runtime_line) is made here once per finished line;
sinks get each read's lines already classified, with their count, and call it no more.

Who touches what: the supervisor thread alone reads (`read`, file I/O, holding no lock) and feeds (`feed`,
under the run's state lock, which guards the screen, the runtime-line positions and whatever the sinks
update). Views never read the reader itself: they read the copy `tail()` makes, under the same lock, for a
RunSnapshot (engine/records/snapshot.py). A sink is called under that lock, so it does in-memory work only:
`kwnb run`'s terminal (cli.py) queues the lines and its main thread prints them.
"""
from __future__ import annotations

import os
from collections import deque
from typing import Callable, Iterator, NamedTuple

from .follow import FileFollower
from .screen import TerminalScreen
from .tf_messages import is_runtime_line, runtime_line_numbers


class Lines(NamedTuple):
    """What one read of a task's log brought, as every sink gets it (a named tuple: made at every read of every
    task, it costs 1.2 us to make, a frozen dataclass 2.1)."""

    text: str  # as written, `\r`-redrawn progress bars included: what the metrics and message parsers read
    finished: str  # the lines it finished, rendered, each ended by `\n` (trailing spaces not yet stripped)
    runtime: tuple = ()  # which of them (counted from 0) are TensorFlow's runtime lines, folded by default

    def lines(self) -> Iterator[tuple[str, bool]]:
        """Each finished line, stripped, with whether it is a runtime line."""
        runtime = set(self.runtime)
        for number, line in enumerate(self.finished.split("\n")[:-1]):
            yield line.rstrip(), number in runtime


Sink = Callable[[Lines], None]


class TaskOutput:
    """The one reader of a task's log (see the module's docstring for who calls what under which lock)."""

    def __init__(self, path: os.PathLike | str, keep: int | None = 300, sinks: tuple[Sink, ...] = ()):
        self.screen = TerminalScreen(keep=keep)  # keep=None keeps every line (Run.logs)
        self.sinks = tuple(sinks)
        self.runtime_lines = 0  # TensorFlow's runtime lines among the finished ones, all of them
        self._runtime_at: deque[int] = deque()  # their numbers in the whole log, for those still on screen
        self._follower = FileFollower(path)

    def read(self) -> str:
        """What the log gained since the last read (at most follow.MAX_READ bytes): the I/O, with no lock."""
        return self._follower.read_new()

    def feed(self, text: str) -> Lines:
        """Render `text`, classify the lines it finished and hand them to every sink."""
        screen, marked = self.screen, self._runtime_at
        before = screen.total_lines
        finished = screen.feed_text(text)
        runtime = tuple(runtime_line_numbers(finished)) if finished else ()
        if runtime:
            self.runtime_lines += len(runtime)
            marked.extend(before + number for number in runtime)
        if marked:  # forget the marks of lines no longer on screen
            oldest = screen.total_lines - len(screen.lines)
            while marked and marked[0] < oldest:
                marked.popleft()
        lines = Lines(text, finished, runtime)
        for sink in self.sinks:
            sink(lines)
        return lines

    def feed_file(self) -> None:
        """Read and feed the whole log as it is now (a past run's, or Run.logs): the same reader, the same lines."""
        while text := self.read():
            self.feed(text)

    def tail(self, count: int | None = None) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """A copy of the last lines on screen (the unfinished one included) and which of them are runtime lines.

        The line still being drawn is classified here, as it is now; once finished, `feed` decides for good."""
        shown = self.screen.tail(count)
        drawing = bool(shown) and bool(self.screen.current.strip())
        first = self.screen.total_lines - (len(shown) - drawing)  # the number, in the whole log, of shown[0]
        runtime = [number - first for number in self._runtime_at if number >= first]
        if drawing and is_runtime_line(shown[-1]):
            runtime.append(len(shown) - 1)
        return tuple(shown), tuple(runtime)

    @property
    def total_lines(self) -> int:
        """Lines on screen so far, the one being drawn included (what the views count)."""
        return self.screen.total_lines + (1 if self.screen.current.strip() else 0)
