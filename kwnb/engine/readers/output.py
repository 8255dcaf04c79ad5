"""A task's output, read once: one reader per task turns the bytes of its log into whole pieces and finished
lines and hands each read's to the sinks chosen when it was made, as TensorFlow's multi_process_runner reads
each subprocess's stdout once and hands every line to the outputs it was built with (printed, queued, or both).

Where a piece ends is decided here once (readers/lines.py: at `\\n`, or at `\\r` where a progress bar draws
its line again), with the one cap on a line still being written; sinks get whole pieces only and keep no
partial line of their own. When the task ends, the line it was drawing ends too, for the screen and every
sink alike (`end`); the newline the next attempt's separator begins with then ends nothing.

The reader itself keeps what views show: the last lines as a terminal shows them (Keras progress bars
redraw a line with `\\r` and `\\b`, even into files: screen.py renders them) and which of them are
TensorFlow's runtime lines. That decision (tf_messages.is_runtime_line) is made here once per finished line;
sinks get each read's lines already classified, with their count, and call it no more. Given a `kept` file,
it also appends every finished line there as shown, once, after a mark (RUNTIME_MARK for a runtime line, a
space for the rest): what `Run.logs` and a past run's logs read (`read_kept`), so no part of kwnb reads the
log a second time.

Who touches what: the supervisor thread alone reads (`read`, file I/O, holding no lock) and feeds (`feed`,
under the run's state lock, which guards the screen, the runtime-line positions and whatever the sinks
update; its one write, appending the finished lines to `kept`, goes to the page cache: about a microsecond a
KiB). Views never read the reader itself: they read the copy `tail()` makes, under the same lock, for a
RunSnapshot (engine/records/snapshot.py). A sink is called under that lock, so it does in-memory work only:
`kwnb run`'s terminal (cli.py) queues the lines and its main thread prints them.
"""
from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from .follow import FileFollower
from .lines import LineSplitter, unstyled
from .screen import TerminalScreen
from .tf_messages import is_runtime_line, runtime_line_numbers

RUNTIME_MARK, LINE_MARK = "~", " "  # before each line of a kept file: TensorFlow's runtime line, or any other


class Lines(NamedTuple):
    """What one read of a task's log brought, as every sink gets it (a named tuple: made at every read of every
    task, it costs 1.2 us to make, a frozen dataclass 2.1)."""

    text: str  # whole pieces (each ended by `\n` or `\r`), progress bars' `\b` included, styling not: what parsers read
    finished: str  # the lines it finished, rendered, each ended by `\n`: one for each `\n` in text (not yet rstripped)
    runtime: tuple = ()  # which of them (counted from 0) are TensorFlow's runtime lines, folded by default

    def lines(self) -> Iterator[tuple[str, bool]]:
        """Each finished line, stripped, with whether it is a runtime line."""
        runtime = set(self.runtime)
        for number, line in enumerate(self.finished.split("\n")[:-1]):
            yield line.rstrip(), number in runtime


Sink = Callable[[Lines], None]


class TaskOutput:
    """The one reader of a task's log (see the module's docstring for who calls what under which lock)."""

    def __init__(self, path: os.PathLike | str, keep: int | None = 300, sinks: tuple[Sink, ...] = (),
                 kept: os.PathLike | str | None = None):
        self.screen = TerminalScreen(keep=keep)  # keep=None keeps every line (a log an older kwnb left, read whole)
        self.sinks = tuple(sinks)
        self.kept = kept  # where every finished line is appended, marked (None: nowhere)
        if kept is not None:  # made at once: a task that prints nothing has an empty one, not none
            os.close(os.open(kept, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
        self.runtime_lines = 0  # TensorFlow's runtime lines among the finished ones, all of them
        self._runtime_at: deque[int] = deque()  # their numbers in the whole log, for those still on screen
        self._follower = FileFollower(path)
        self._pieces = LineSplitter()
        self._ended = False  # `end` ended the line being drawn: a newline right after it ends nothing more

    def read(self) -> str:
        """What the log gained since the last read (at most follow.MAX_READ bytes): the I/O, with no lock."""
        return self._follower.read_new()

    def feed(self, text: str) -> Lines:
        """Render `text`, classify the lines it finished and hand them, with the whole pieces, to every sink."""
        if self._ended and text:
            self._ended = False
            text = text[1:] if text[0] == "\n" else text
        before = self.screen.total_lines
        return self._hand(self._pieces.split(text), self.screen.feed_text(text), before)

    def end(self) -> Lines | None:
        """The task has ended: the line it was drawing ends here, for the screen and every sink, as a newline would
        end it (the scanner reads a last line no newline ended). None when nothing was being drawn."""
        before, rest = self.screen.total_lines, unstyled(self._pieces.partial)
        self._pieces.partial = ""
        finished = self.screen.finish()
        if not finished:
            return None
        self._ended = True
        return self._hand(rest + "\n", finished, before)

    def _hand(self, pieces: str, finished: str, before: int) -> Lines:
        """Mark the runtime lines among those just finished (lines `before`... of the log), keep them, hand them on."""
        screen, marked = self.screen, self._runtime_at
        runtime = tuple(runtime_line_numbers(finished)) if finished else ()
        if runtime:
            self.runtime_lines += len(runtime)
            marked.extend(before + number for number in runtime)
        if marked:  # forget the marks of lines no longer on screen
            oldest = screen.total_lines - len(screen.lines)
            while marked and marked[0] < oldest:
                marked.popleft()
        if finished and self.kept is not None:
            with open(os.open(self.kept, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a", encoding="utf-8") as kept:
                kept.write(_marked(finished, runtime))
        lines = Lines(pieces, finished, runtime)
        for sink in self.sinks:
            sink(lines)
        return lines

    def feed_file(self) -> None:
        """Read and feed the whole log as it is now (a folder an older kwnb wrote): the same reader, the same lines."""
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

    def drawing(self) -> tuple[str, bool] | None:
        """The line being drawn, as it is now, with whether it is a runtime line; None when there is none."""
        line = self.screen.current.rstrip()
        return (line, is_runtime_line(line)) if line.strip() else None

    @property
    def kept_lines(self) -> int:
        """Lines appended to `kept` so far: every finished one."""
        return self.screen.total_lines

    @property
    def total_lines(self) -> int:
        """Lines on screen so far, the one being drawn included (what the views count)."""
        return self.screen.total_lines + (1 if self.screen.current.strip() else 0)


def _marked(finished: str, runtime: tuple) -> str:
    """Finished lines as a kept file holds them: each after its mark. A burst with no runtime line (most of a
    chatty log) is marked by one replace, never split into one string per line."""
    if not runtime:
        return LINE_MARK + finished[:-1].replace("\n", "\n" + LINE_MARK) + "\n"
    folded = set(runtime)
    return "".join((RUNTIME_MARK if number in folded else LINE_MARK) + line + "\n"
                   for number, line in enumerate(finished.split("\n")[:-1]))


def read_kept(path: os.PathLike | str, count: int | None = None) -> list[tuple[str, bool]] | None:
    """The lines a task's reader kept in `path`, oldest first, each stripped and with whether it is a runtime line;
    only the first `count` (the file may have grown since they were counted). None when there is no such file."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    rows = text.split("\n")[:-1]  # a line still being appended is left out
    if count is not None:
        rows = rows[:count]
    return [(row[1:].rstrip(), row[:1] == RUNTIME_MARK) for row in rows]
