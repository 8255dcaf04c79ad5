"""A shared import: a run's local tasks forked from one interpreter that imported what the script needs of
TensorFlow once (kwnb/task/forker.py), instead of each task importing it. Measured on the 2-core machine, a
2-task tf-keras run took 6.4 CPU-s in all against about 10 for two cold tasks (docs/testing.md).

Used by the local launcher for a run's tasks that the warm pool cannot serve, when the script imports
TensorFlow (not JAX: JAX is not safe to fork once imported) and the tasks share the environment an import
reads (warm.key); $KWNB_SHARED_IMPORT=0 turns it off, and each task starts cold. One forker per run: it
ends when the run's launcher finishes (end of its input) and its tasks have ended.

A forked task is the forker's child, not the kernel's: the forker reports each task's pid when it forks and
its exit code when it ends (`ForkedPopen` gives them the shape of a `subprocess.Popen`). Until the import is
done a task has no pid: it is starting, and a signal to it cancels its fork.

Which lock guards what: `SharedImport._lock` guards the handles' pid and returncode and the job counter; the
reader thread is the only one that reads the forker's output.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil

from ..task.process_group import OWN_PROCESS_GROUP
from ..task.runfolder import PARENT_PID_ENV
from . import warm as warm_pool
from . import warm_room
from .base import TaskLaunch

FORKER_SCRIPT = str(Path(__file__).parents[1] / "task" / "forker.py")
SHARED_IMPORT_ENV = "KWNB_SHARED_IMPORT"  # 0: each local task imports TensorFlow itself (a cold start)
LOG_NAME = "shared-import.log"  # in the run folder: what the forker printed (an import that failed)
GONE_SECONDS = 2.0  # after the forker ended unexpectedly: how long its tasks' watchdogs take to end them, at most


def enabled() -> bool:
    return os.environ.get(SHARED_IMPORT_ENV, "1") != "0"


def shareable(launches: list[TaskLaunch]) -> tuple[str, ...]:
    """What the run's tasks would import once, shared: TensorFlow and tf-keras, for a run of two tasks or more
    that share the environment the import reads; () when sharing cannot help or is not safe."""
    if len(launches) < 2 or len({warm_pool.key(launch.python, launch.env) for launch in launches}) > 1:
        return ()
    imports = warm_room.warm_imports(launches[0].script, launches[0].env)
    return imports if imports == warm_room.WARM_IMPORTS else ()  # not Keras 3 nor JAX: forking them is not safe


class ForkedPopen:
    """A forked task, as much of `subprocess.Popen` as the local launcher uses."""

    def __init__(self, server: "SharedImport", job_id: int):
        self._server, self.job_id = server, job_id
        self.pid: int | None = None
        self.returncode: int | None = None
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked task {self.job_id}", timeout)
        return self.returncode

    def cancel(self, signum: int) -> None:
        """A signal before the fork: the task is not started (the forker says it ended, -signum)."""
        self._server.send({"cancel": self.job_id, "signal": int(signum)})

    def _end(self, code: int) -> None:
        self.returncode = code
        self._ended.set()


class SharedImport:
    """One forker for one run's tasks; `fork` hands it a task."""

    def __init__(self, python: str, env: dict[str, str], cwd: str, imports: tuple[str, ...], log: Path,
                 enter=None):
        """`env`: the run's first task's, less what differs per task; `enter`: a private network's `enter`."""
        self._lock = threading.Lock()
        self._handles: dict[int, ForkedPopen] = {}
        self._next = 0
        argv = [python, "-u", FORKER_SCRIPT, ",".join(imports), str(log)]
        self.key = warm_pool.key(python, env)  # the tasks it may fork (shareable)
        env = {**warm_pool.base_env(env), PARENT_PID_ENV: str(os.getpid())}
        with open(log, "ab") as out:  # what it prints besides the protocol: an import that failed
            self.popen = subprocess.Popen(enter(argv) if enter else argv, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=out, env=env, cwd=cwd, **OWN_PROCESS_GROUP)
        self._reader = threading.Thread(target=self._read, name="kwnb-forker", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None and not self.popen.stdin.closed

    def fork(self, launch: TaskLaunch) -> ForkedPopen:
        with self._lock:
            self._next += 1
            handle = self._handles[self._next] = ForkedPopen(self, self._next)
        self.send({"id": handle.job_id, "argv": launch.argv[3:], "env": launch.env, "cwd": launch.cwd,
                   "log": str(launch.log_path)})
        return handle

    def send(self, message: dict) -> None:
        try:
            self.popen.stdin.write((json.dumps(message) + "\n").encode())
            self.popen.stdin.flush()
        except (OSError, ValueError):
            pass  # it has ended: the reader ends its tasks' handles

    def close(self, wait: float = 0.0) -> None:
        """No more tasks: the forker exits once those it forked have ended; waited for up to `wait` seconds, then
        killed (its tasks have ended when the run finishes: it has nothing left to do)."""
        try:
            self.popen.stdin.close()
        except OSError:
            pass
        if wait:
            try:
                self.popen.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()

    def _read(self) -> None:
        for raw in self.popen.stdout:
            words = raw.decode(errors="replace").split()
            if len(words) == 3 and words[0] in ("forked", "ended") and words[1].isdigit():
                self._apply(words[0], int(words[1]), int(words[2]))
        self.popen.wait()
        self._forker_gone()

    def _apply(self, what: str, job_id: int, value: int) -> None:
        with self._lock:
            handle = self._handles.get(job_id)
            if handle is None:
                return
            if what == "forked":
                handle.pid = value
            else:
                self._handles.pop(job_id)
                handle._end(value)

    def _forker_gone(self) -> None:
        """The forker ended with tasks unreported (killed): each forked one is ended by its watchdog within a
        second; a task not yet forked never started."""
        with self._lock:
            left, self._handles = list(self._handles.values()), {}
        deadline = time.monotonic() + GONE_SECONDS
        for handle in left:
            while handle.pid is not None and psutil.pid_exists(handle.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            handle._end(-signal.SIGKILL)

