"""Python's faulthandler dump in a task's log, read into a NativeCrash (tf_events.py). Standard library only.

Every task enables faulthandler (kwnb/task/bootstrap.py), so a fault in compiled code (SIGSEGV, SIGBUS, SIGILL,
SIGFPE, SIGABRT) prints, as Python 3.10-3.13 write it::

    Fatal Python error: Segmentation fault            (may follow a progress bar on the same line)

    Thread 0x00007fdd86ba66c0 (most recent call first):
      File ".../bootstrap.py", line 23 in _watch_parent
      ...
    Current thread 0x00007fdd8786db80 (most recent call first):
      File ".../keras/src/trainers/epoch_iterator.py", line 99 in reset
      File "/work/run/main.py", line 58 in <module>
      ...

    Extension modules: numpy._core._multiarray_umath, ... (total: 76)

"Current thread" marks the thread that faulted when it ran Python; a fault in a thread the runtime started (a
TensorFlow op's) marks none. The dump ends at the first line that is none of these.
"""
from __future__ import annotations

import re
from typing import Callable

from .tf_events import Frame, NativeCrash

MARKER = "Fatal Python error: "
_THREAD = ("Thread 0x", "Current thread 0x")
_FRAME = re.compile(r'  File "(.*)", line (\d+) in (.*)')


class FaultDump:
    """The lines of one dump, fed one at a time after its first (`take`), then made an event (`crash`)."""

    def __init__(self, line: str, is_user: Callable[[str], bool]):
        self.error = line[line.index(MARKER) + len(MARKER):].strip()
        self._is_user = is_user
        self._lines = [line[line.index(MARKER):]]
        self._threads: list[list[Frame]] = []  # each innermost first, as printed
        self._current: list[Frame] | None = None

    def take(self, line: str) -> bool:
        """True for a line of the dump; False for the first line after it (which the caller reads as usual)."""
        if line.startswith(_THREAD):
            self._threads.append([])
            if line.startswith("Current"):
                self._current = self._threads[-1]
        elif self._threads and (match := _FRAME.match(line)):
            self._threads[-1].append(Frame(match.group(1), int(match.group(2)), match.group(3)))
        elif not line.startswith("Extension modules: "):
            return False
        self._lines.append(line)
        return True

    def crash(self) -> NativeCrash:
        """The dump as an event: the thread that ran the user's code, else the one that faulted, else the longest."""
        users = [t for t in self._threads if any(self._is_user(f.file) for f in t)]
        if users:
            thread = users[0]
        elif self._current is not None:
            thread = self._current
        else:
            thread = max(self._threads, key=len, default=[])
        user = next((f for f in thread if self._is_user(f.file)), None)
        lines = tuple(line for line in self._lines if not line.startswith("Extension modules: "))
        return NativeCrash(error=self.error, frames=tuple(reversed(thread)), user_frame=user, lines=lines)
