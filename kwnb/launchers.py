"""Ways of starting a cluster's processes: one class per way, as in ipyparallel's launchers.

A launcher decides where tasks listen and starts one process per task; the Run above it does
the bookkeeping (logs, status, failure policy) the same way whatever started the processes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .cluster import Task, free_ports

BOOTSTRAP = str(Path(__file__).with_name("_bootstrap.py"))


class LaunchError(RuntimeError):
    """The tasks could not be started here (a missing scheduler, a rejected job); the message says why."""


@dataclass
class TaskLaunch:
    """Everything needed to start one task's process."""

    task: Task
    python: str
    script: str
    args: list[str]
    env: dict[str, str]
    cwd: str
    log_path: Path
    argv: list[str] = field(init=False)

    def __post_init__(self):
        self.argv = [self.python, "-u", BOOTSTRAP, self.script, *self.args]


class TaskProcess(ABC):
    """A started task: enough to poll it and to end it."""

    pid: int | None

    @abstractmethod
    def poll(self) -> int | None: ...

    @abstractmethod
    def signal(self, signum: int) -> None: ...

    def tf_config(self) -> dict | None:
        """The TF_CONFIG the task made itself, where only it knows its address (a batch scheduler)."""
        return None

    def where(self) -> str:
        return f"pid {self.pid}"

    def queued(self) -> bool:
        """Still waiting for a scheduler to give it a machine."""
        return False

    def stop(self, grace: float = 3.0) -> None:
        """TERM, then KILL whatever is left after `grace` seconds."""
        if self.poll() is None:
            self.signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        self.signal(signal.SIGKILL)


class Launcher(ABC):
    name: str
    controls_single_tasks = True  # can kill or restart one task while the others run

    def check(self) -> None:
        """Raise LaunchError, before a run creates anything, if this way of starting cannot work here."""

    @abstractmethod
    def addresses(self, tasks: list[Task]) -> list[str] | None:
        """host:port for each task, in order; None if only the started tasks can know (see tf_config)."""

    @abstractmethod
    def start(self, launch: TaskLaunch) -> TaskProcess:
        """Start one task (also used to restart one)."""

    def start_all(self, launches: list[TaskLaunch]) -> list[TaskProcess]:
        return [self.start(launch) for launch in launches]

    def finish(self) -> list[str]:
        """Called once every task has ended: tidy up, and say what the user should know (why a job ended)."""
        return []


class LocalProcess(TaskProcess):
    def __init__(self, popen: subprocess.Popen):
        self._popen = popen
        self.pid = popen.pid
        self._descendants: dict[int, psutil.Process] = {}
        self._descendants_at = float("-inf")

    def poll(self) -> int | None:
        # psutil walks all of /proc for children(): at most once a second, which still catches any
        # child that lives longer than that (killpg reaches the rest through the process group).
        if self._popen.returncode is None and time.monotonic() - self._descendants_at >= 1.0:
            self._descendants_at = time.monotonic()
            self._remember_descendants()
        return self._popen.poll()

    def _remember_descendants(self) -> None:
        # Children that leave the worker's process group would escape killpg; psutil finds them,
        # but only while the worker lives, so they are noted on every poll.
        try:
            for child in psutil.Process(self.pid).children(recursive=True):
                self._descendants.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def signal(self, signum: int) -> None:
        if self._popen.returncode is None:
            self._remember_descendants()  # fresh at the moment it matters, whatever the poll throttle
            try:
                os.killpg(self.pid, signum)  # the worker leads its own group: its children go too
            except ProcessLookupError:
                pass
        for child in list(self._descendants.values()):
            try:
                child.send_signal(signum)  # psutil checks the pid was not reused
            except psutil.Error:
                self._descendants.pop(child.pid, None)
        if signum == signal.SIGKILL:
            self._popen.wait()


class LocalLauncher(Launcher):
    """Subprocesses on this machine, each listening on a free localhost port."""

    name = "local"

    def addresses(self, tasks: list[Task]) -> list[str]:
        return [f"localhost:{port}" for port in free_ports(len(tasks))]

    def start(self, launch: TaskLaunch) -> TaskProcess:
        with open(launch.log_path, "ab", buffering=0) as log:
            popen = subprocess.Popen(
                launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=launch.env,
                cwd=launch.cwd,
                **OWN_PROCESS_GROUP,
            )
        return LocalProcess(popen)


# Each worker leads a process group of its own, so stop() reaches its children and a Ctrl-C meant for
# the terminal does not. Not a session of its own: Linux shares CPU between sessions first
# (autogroups), and workers in their own sessions trained 5 % slower than workers sharing the
# launcher's session in a paired benchmark (benchmarks/README.md).
OWN_PROCESS_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}


BACKENDS = ("local", "slurm")
SLURM_FLAGS = {"partition": "--partition", "nodes": "--nodes", "time": "--time", "sbatch_args": "--sbatch-arg"}


def make_launcher(backend: str = "local", **options) -> Launcher:
    """The launcher for `--backend`, with its own options (e.g. Slurm's partition)."""
    given = {key: value for key, value in options.items() if value not in (None, [], ())}
    if backend == "local":
        if given:
            names = ", ".join(SLURM_FLAGS.get(key, key) for key in given)
            raise ValueError(f"{names} only apply with --backend slurm")
        return LocalLauncher()
    if backend == "slurm":
        from .slurm import SlurmLauncher

        return SlurmLauncher(**options)
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
