"""Every thread's Python stack of a live task, on demand and without privileges.

The bootstrap registers faulthandler on STACKS_SIGNAL (kwnb/task/bootstrap.py); kwnb sends that signal
to the task's own process and reads what it appended to its stacks file in the run folder (not its
log). faulthandler shows Python frames only (at most 100 frames and 100 threads). Where py-spy is
installed and allowed to attach, its native frames are added; kwnb never needs it.
"""
from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ...task.runfolder import STACKS_SIGNAL_NAME

if TYPE_CHECKING:
    from ..tasks.task import Task

DUMP_SECONDS = 3.0  # a dump is written from the signal handler within milliseconds; a busy machine is slower
SETTLE_SECONDS = 0.2  # a dump is complete once its file stops growing for this long
_FRAME = re.compile(r'\s+File "(.*)", line (\d+) in (\S+)')
_STDLIB = re.compile(r"/lib/python3\.\d+/")


def capture(tasks: list["Task"], native: bool = False) -> dict[int, str]:
    """{position: stacks text} of every live task that can dump its stacks (its bootstrap is ready)."""
    offsets = {}
    for task in tasks:
        path = task.stacks_path
        if task.alive:
            task.fetch_files()  # the size before the signal, of a file that may live on another node
        if task.alive and path.exists():
            offsets[task.position] = (task, path, path.stat().st_size)  # before the signal: the dump is what grows after it
    signalled = set()  # one signal per scope, after every offset is read: under Slurm one reaches the whole job
    for position, (task, _, _) in list(offsets.items()):
        scope = task.signal_scope()
        if scope in signalled:
            continue
        if task.signal_own_process(getattr(signal, STACKS_SIGNAL_NAME)):
            signalled.add(scope)
        else:
            del offsets[position]  # it ended meanwhile
    dumps = _collect(offsets)
    if native and py_spy():
        for position, (task, _, _) in offsets.items():
            dumps[position] = dumps.get(position, "") + _py_spy(task.pid)
    return dumps


def _collect(offsets: dict) -> dict[int, str]:
    deadline, sizes, settled_at, dumps = time.monotonic() + DUMP_SECONDS, {}, {}, {}
    while offsets.keys() - dumps.keys() and time.monotonic() < deadline:
        time.sleep(0.05)
        for position, (task, path, start) in offsets.items():
            if position not in dumps:
                task.fetch_files()
            size = path.stat().st_size if path.exists() else start
            if size > start and size == sizes.get(position):
                if time.monotonic() - settled_at[position] >= SETTLE_SECONDS:
                    with open(path, "rb") as handle:
                        handle.seek(start)
                        dumps[position] = handle.read(size - start).decode("utf-8", errors="replace")
            elif size != sizes.get(position):
                sizes[position], settled_at[position] = size, time.monotonic()
    return dumps


def py_spy() -> str | None:
    """py-spy on PATH, or beside this Python (a venv whose bin/ is not on PATH)."""
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.is_file() else None)


def _py_spy(pid: int | None) -> str:
    try:
        result = subprocess.run([py_spy(), "dump", "--native", "--pid", str(pid)], capture_output=True, text=True,
                                timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if result.returncode != 0:
        return f"\n(py-spy could not attach: {result.stderr.strip().splitlines()[-1:] or ['no reason']})\n"
    return "\npy-spy --native:\n" + result.stdout


def threads(text: str) -> list[list[tuple[str, int, str]]]:
    """The dump's threads, each a list of (file, line, function), innermost first (as faulthandler prints)."""
    found: list[list] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            found.append([])
        elif found and (match := _FRAME.match(line)):
            found[-1].append((match.group(1), int(match.group(2)), match.group(3)))
    return found


def main_thread(stacks: list) -> list | None:
    """The main thread of a dump's `threads`: the one that runs the bootstrap (its outermost frame), else the longest."""
    return next((s for s in stacks if s and s[-1][0].endswith("bootstrap.py")), None) or max(stacks, key=len, default=None)


def standard_library(file: str) -> bool:
    """A frame of Python's standard library (lib/python3.X/, not its site-packages): where a wait is, not
    whose it is (multiprocessing.pool and threading wait for TensorFlow as for the user's code)."""
    return bool(_STDLIB.search(file)) and not any(part in file for part in ("/site-packages/", "/dist-packages/"))


def innermost_owner(main: list) -> tuple | None:
    """The innermost frame outside the standard library: the code that made the main thread wait."""
    return next((frame for frame in main if not standard_library(frame[0])), None)


def user_frame(main: list, user_files: tuple = ()) -> tuple | None:
    """The innermost (file, line, function) of a thread's frames in the user's files, or None."""
    names = tuple(str(f) for f in user_files)
    return next((f for f in main if names and f[0].endswith(names)), None)


def blocked_at(text: str, user_files: tuple = ()) -> str | None:
    """Where the main thread waits: its innermost frame in the user's files, else its innermost frame."""
    main = main_thread(threads(text))
    if not main:
        return None
    frame = user_frame(main, user_files) or main[0]
    return f"{frame[0].rpartition('/')[2]} line {frame[1]}, in {frame[2]}"
