"""A shared import: a run's local tasks forked from one interpreter that imported what the script needs of
TensorFlow once (kwnb/task/forker.py), instead of each task importing it. Measured on the 2-core machine, a
2-task tf-keras run took 6.4 CPU-s in all against about 10 for two cold tasks (docs/testing.md).

Used by the local launcher for a run's tasks that the warm pool cannot serve, when the script imports
TensorFlow, or under KERAS_BACKEND=jax jax or keras, and the tasks share the environment an import reads
(warm.key). Only those are asked for before the fork (FORKABLE, FORKABLE_ON_JAX, and Keras 3 on TensorFlow or
JAX: KERAS_FORKS_ON, never for a script that sets KERAS_BACKEND itself, warm_room.warm_imports), jax first: JAX is
unsafe to fork once a backend is initialized, which importing it does not do, and each task initializes its own after the
fork; TensorFlow imported after jax sets up TFLite's converter of JAX functions, as in a cold task.
$KWNB_SHARED_IMPORT=0 turns it off, and each task starts cold. The forker stays on this
machine's network; the tasks of a run in a private network join it after the fork (netns.namespaces).

When its run ends, a launcher without warm starts keeps its forker (`keep`) for the process's next run
(`take`): runs one after another (a sweep, `kwnb.launch` in a loop, a notebook's next cell with warm starts
off) then fork at once from the import the first one made. At most one is kept, for KEEP_SECONDS after its
last run, and only for a run whose tasks share its environment; with warm starts on, the pool prepares the
next run instead (backends/warm.py), and the forker ends with its run.

A forked task is the forker's child, not the kernel's: the forker reports each task's pid when it forks and
its exit code when it ends (`ForkedPopen` gives them the shape of a `subprocess.Popen`). Until the import is
done a task has no pid: it is starting, and a signal to it cancels its fork.

Which lock guards what: `SharedImport._lock` guards the handles' pid and returncode and the job counter; the
reader thread is the only one that reads the forker's output. `_KEPT_LOCK` guards the kept forker and its timer.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import tempfile
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
# Imported before a fork: TensorFlow forks cleanly once imported (its threads idle, nothing initialized). JAX is
# not safe to fork once a backend is initialized (jax/_src/xla_bridge.py installs its fork warning then), which
# importing jax and Keras 3 on it does not do: each task initializes its own after the fork
# (keras.distribution.initialize()). Their import costs about 2 CPU-s a task (1.8-2.3 s, three runs).
FORKABLE = ("tensorflow", "tf_keras")
FORKABLE_ON_JAX = ("jax",)  # under KERAS_BACKEND=jax only
# Keras 3 imports the backend KERAS_BACKEND names (TensorFlow where it is unset): on these it forks as they do. A
# fork after Keras 3 on TensorFlow, then a fit in each child, measured: both trained, 1.2-1.3 CPU-s each.
KERAS_FORKS_ON = ("", "tensorflow", "jax")
KEEP_SECONDS = 120.0  # a kept forker's life after its last run: runs one after another come seconds apart; its
# import (about 300 MB PSS with TensorFlow) is given back two minutes after the last of them
GONE_SECONDS = 2.0  # after the forker ended unexpectedly: how long its tasks' watchdogs take to end them, at most


def enabled() -> bool:
    return os.environ.get(SHARED_IMPORT_ENV, "1") != "0"


def shareable(launches: list[TaskLaunch]) -> tuple[str, ...]:
    """What the run's tasks would import once, shared: of what a warm interpreter would import for them, the
    TensorFlow part (FORKABLE), under Keras on JAX jax (FORKABLE_ON_JAX), and Keras 3 on either, for a run of two
    tasks or more that share the environment the import reads; () when sharing cannot help. Each task initializes its
    backend itself, after the fork."""
    if len(launches) < 2 or len({warm_pool.key(launch.python, launch.env) for launch in launches}) > 1:
        return ()
    backend = launches[0].env.get("KERAS_BACKEND", "")
    forkable = FORKABLE + (FORKABLE_ON_JAX if backend == "jax" else ()) + \
        (("keras",) if backend in KERAS_FORKS_ON else ())
    imports = tuple(name for name in warm_room.warm_imports(launches[0].script, launches[0].env) if name in forkable)
    return imports if {"tensorflow", "jax"} & set(imports) else ()


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
    """One forker, for a run's tasks and perhaps the next runs'; `fork` hands it a task."""

    def __init__(self, python: str, env: dict[str, str], cwd: str, imports: tuple[str, ...]):
        """`env`: the run's first task's, less what differs per task."""
        self._lock = threading.Lock()
        self._handles: dict[int, ForkedPopen] = {}
        self._next = 0
        argv = [python, "-u", FORKER_SCRIPT, ",".join(imports)]
        self.key = warm_pool.key(python, env)  # the tasks it may fork (shareable)
        self.imports = imports
        env = {**warm_pool.base_env(env), PARENT_PID_ENV: str(os.getpid())}
        # Its stderr, what the import prints, is copied to the start of each task's log (an import that failed): a
        # file with no name, which goes with the forker and its tasks, whichever runs it served and however it ends.
        with tempfile.TemporaryFile() as output:
            self.popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=output, env=env,
                                          cwd=cwd, **OWN_PROCESS_GROUP)
        self._reader = threading.Thread(target=self._read, name="kwnb-forker", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None and not self.popen.stdin.closed

    def fork(self, launch: TaskLaunch, namespaces: list[str] | tuple = ()) -> ForkedPopen:
        """The task, forked once the import is done; `namespaces`: its private network's (netns.namespaces)."""
        with self._lock:
            self._next += 1
            handle = self._handles[self._next] = ForkedPopen(self, self._next)
        self.send({"id": handle.job_id, "argv": launch.argv[3:], "env": launch.env, "cwd": launch.cwd,
                   "log": str(launch.log_path), "namespaces": list(namespaces)})
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



_kept: SharedImport | None = None  # the last run's forker, kept for the next (guarded by _KEPT_LOCK)
_kept_timer: threading.Timer | None = None  # ends it at _kept_until (time.monotonic)
_kept_until = 0.0
_KEPT_LOCK = threading.Lock()


def keep(forker: SharedImport) -> None:
    """Keep a forker whose run has ended, for the next run of this process, for KEEP_SECONDS; the one kept
    before ends."""
    global _kept, _kept_timer, _kept_until
    if not forker.alive:
        return
    with _KEPT_LOCK:
        before, _kept = _kept, forker
        if _kept_timer is not None:
            _kept_timer.cancel()
        _kept_timer = threading.Timer(KEEP_SECONDS, _expire, args=(forker,))
        _kept_timer.daemon = True
        _kept_timer.start()
        _kept_until = time.monotonic() + KEEP_SECONDS
    if before is not None and before is not forker:
        before.close()


def take(key: str, held_back: frozenset[str]) -> SharedImport | None:
    """The kept forker, if it can fork tasks with this key and imported none of `held_back`, what the run's tasks
    must import themselves (warm_room.held_back: keras imported for an earlier run would ignore the KERAS_BACKEND a
    script sets), then it is the caller's until it keeps it again; a kept one that cannot ends (the runs moved on)."""
    kept = _pop_kept()
    if kept is not None and kept.alive and kept.key == key and not held_back & set(kept.imports):
        return kept
    if kept is not None:
        kept.close()
    return None


def _pop_kept() -> SharedImport | None:
    """The kept forker, no longer kept (its timer stopped)."""
    global _kept, _kept_timer
    with _KEPT_LOCK:
        kept, _kept = _kept, None
        if _kept_timer is not None:
            _kept_timer.cancel()
            _kept_timer = None
    return kept


def kept_status() -> dict | None:
    """The kept forker, for %kw_pool: its pid, what it imported, its memory (PSS) and the seconds it has left."""
    with _KEPT_LOCK:
        kept, until = _kept, _kept_until
    if kept is None or not kept.alive:
        return None
    try:
        pss = psutil.Process(kept.popen.pid).memory_full_info().pss
    except (psutil.Error, AttributeError):
        pss = 0
    return {"pid": kept.popen.pid, "imports": kept.imports, "pss": pss, "left": max(0.0, until - time.monotonic())}


def end_kept(wait: float = 2.0) -> bool:
    """End the kept forker now (%kw_pool --stop, the process's exit), waited for up to `wait` seconds (it has no
    task: it exits at once); whether there was one."""
    kept = _pop_kept()
    if kept is not None:
        kept.close(wait=wait)
    return kept is not None


def _expire(forker: SharedImport) -> None:
    global _kept
    with _KEPT_LOCK:
        if _kept is not forker:
            return  # taken meanwhile
        _kept = None
    forker.close()


atexit.register(end_kept)  # at exit the kept forker ends with the process, not half a second later when its own
# watchdog sees the kernel gone: a user removed once a learner's process has ended has none left
