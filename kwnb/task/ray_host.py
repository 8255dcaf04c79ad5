"""Inside the Ray actor that hosts one task (backends/ray.py makes it a Ray actor): standard library only.

The actor holds a port on its node until the task starts, starts the task as a process group of its
own, with its output in a file on the node (no shared filesystem is assumed: the launcher reads it
back through `read`, with what the task writes into its run folder, kept on the node too), and signals
the group and any descendant that left it (`ray.kill` of the actor alone would leave a `setsid` grandchild
running). The task's watchdog (bootstrap.py) watches this actor's process: if Ray ends the actor (the driver left, the kernel died), the task ends too.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from .process_group import OWN_PROCESS_GROUP
from .runfolder import PARENT_PID_ENV, RUN_DIR_ENV, grows

MAX_READ = 1 << 20  # bytes of output per read: a read is one message to the driver (Ray's limit is 512 MiB)
PARTIAL = -1  # a file's marker when a read took only part of it: the next read takes the rest
DESCENDANTS_SECONDS = 1.0  # how often the descendants are noted while the task lives (a walk of /proc)
BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap.py")


class TaskHost:
    """One task's process on whichever node Ray placed this actor."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="kwnb-ray-")
        self.output = os.path.join(self.folder, "output")
        self.run_folder = os.path.join(self.folder, "run")  # the task's stacks and reports, read back with `read`
        self.holder: socket.socket | None = None
        self.popen: subprocess.Popen | None = None
        self.descendants: dict[int, bytes] = {}  # pid -> its /proc stat start time (a reused pid is not ours)
        self.noted_at = float("-inf")

    def reserve(self, port: int = 0) -> int:
        """Hold a port (a free one, or the task's own again for a restart) until the task starts."""
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("", port))  # TensorFlow's server listens on every address of the node
        self.holder = holder
        return holder.getsockname()[1]

    def start(self, python: str, argv: list[str], env: dict[str, str], cwd: str, files: dict[str, bytes]) -> int:
        """Start the task (argv: the script and its args) with the node's environment under kwnb's and the
        user's variables, in `python` if this node has it (else the actor's own); `files` are the script and
        its helpers, written where the script does not exist on this node. Returns the task's pid."""
        script, *args = argv
        if not os.path.exists(script):
            cwd = os.path.join(self.folder, "cwd")
            os.makedirs(cwd, exist_ok=True)
            for name, data in files.items():
                with open(os.path.join(cwd, name), "wb") as copy:
                    copy.write(data)
            script = os.path.join(cwd, os.path.basename(script))
        elif not os.path.isdir(cwd):
            cwd = os.path.dirname(script)
        full = {**os.environ, **env, PARENT_PID_ENV: str(os.getpid())}
        if RUN_DIR_ENV in env:  # the run folder is the driver's; on this node the task writes into its own
            os.makedirs(self.run_folder, exist_ok=True)
            full[RUN_DIR_ENV] = self.run_folder
        if self.holder is not None:
            self.holder.close()  # just before the task binds it
            self.holder = None
        with open(self.output, "ab", buffering=0) as output:
            python = python if os.access(python, os.X_OK) else sys.executable
            self.popen = subprocess.Popen([python, "-u", BOOTSTRAP, script, *args], stdin=subprocess.DEVNULL,
                                          stdout=output, stderr=subprocess.STDOUT, env=full, cwd=cwd,
                                          **OWN_PROCESS_GROUP)
        self.descendants, self.noted_at = {}, float("-inf")
        return self.popen.pid

    def read(self, offset: int, seen: dict[str, tuple[int, int]] | None = None) -> tuple:
        """Output from `offset` on, the exit code once all of it and of the run folder's files is read,
        (rss bytes, CPU seconds), and what changed in the task's run folder since `seen` (`files`)."""
        code = None if self.popen is None else self.popen.poll()
        with open(self.output, "rb") if os.path.exists(self.output) else open(os.devnull, "rb") as output:
            output.seek(offset)
            data = output.read(MAX_READ)
            more = output.read(1)
        changed, complete = self.files(seen or {})
        more = more or not complete
        if code is None and self.popen is not None and time.monotonic() - self.noted_at >= DESCENDANTS_SECONDS:
            self._note_descendants()
        return data, (code if not more else None), (self._sample() if code is None else None), changed

    def files(self, seen: dict[str, tuple[int, int]]) -> tuple[dict[str, tuple[int, bytes, tuple[int, int]]], bool]:
        """{name: (start, bytes from start, marker)} of each file of the task's run folder whose (size,
        mtime_ns) is not the marker in `seen` (a file that grows from where the reader is, another whole),
        and whether that is all of it (at most MAX_READ bytes a read)."""
        changed, budget = {}, MAX_READ
        names = sorted(os.listdir(self.run_folder)) if os.path.isdir(self.run_folder) else []
        for name in names:
            if budget <= 0:
                return changed, False
            path = os.path.join(self.run_folder, name)
            try:
                stat = os.stat(path)
                had = seen.get(name)
                if had is not None and tuple(had) == (stat.st_size, stat.st_mtime_ns):
                    continue
                going_on = had is not None and (grows(name) or had[1] == PARTIAL) and stat.st_size >= had[0]
                start = had[0] if going_on else 0
                with open(path, "rb") as handle:
                    handle.seek(start)
                    data = handle.read(budget)
            except OSError:
                continue
            whole = start + len(data) >= stat.st_size
            changed[name] = (start, data, (start + len(data), stat.st_mtime_ns if whole else PARTIAL))
            budget -= len(data)
        return changed, all(marker[1] != PARTIAL for _, _, marker in changed.values())

    def signal(self, signum: int, group: bool = True) -> None:
        """The task's process group and its descendants that left it; or (`group` False) its own process."""
        if self.popen is None:
            return
        if not group:
            if self.popen.poll() is None:
                os.kill(self.popen.pid, signum)
            return
        if self.popen.poll() is None:
            self._note_descendants()
            try:
                os.killpg(self.popen.pid, signum)
            except ProcessLookupError:
                pass
        for pid, started in list(self.descendants.items()):
            if _stat(pid)[1] == started:
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
        if signum == signal.SIGKILL:
            self.popen.wait()

    def _note_descendants(self) -> None:
        self.noted_at = time.monotonic()
        children: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                parent, _ = _stat(int(name))
                children.setdefault(parent, []).append(int(name))
        todo = [self.popen.pid]
        while todo:
            for pid in children.get(todo.pop(), []):
                started = _stat(pid)[1]
                if started:
                    self.descendants.setdefault(pid, started)
                todo.append(pid)

    def _sample(self) -> tuple[int, float] | None:
        """The task's memory and CPU, its process and descendants together (from /proc)."""
        page, ticks = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
        rss, cpu = 0, 0.0
        for pid in [self.popen.pid, *self.descendants]:
            try:
                with open(f"/proc/{pid}/statm") as statm:
                    rss += int(statm.read().split()[1]) * page
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                cpu += (int(fields[11]) + int(fields[12])) / ticks
            except (OSError, IndexError, ValueError):
                continue
        return (rss, cpu) if rss else None

    def close(self) -> None:
        """Nothing of the task left: its processes, its port, its files."""
        if self.popen is not None:
            self.signal(signal.SIGKILL)
        if self.holder is not None:
            self.holder.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _stat(pid: int) -> tuple[int, bytes]:
    """A process's parent and start time (fields 4 and 22 of /proc/PID/stat), or (0, b"") if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), fields[19]
    except (OSError, IndexError, ValueError):
        return 0, b""
