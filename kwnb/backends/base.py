"""What every way of starting a cluster's processes provides; the ways themselves are the other
modules of this package, one class each, found by name (kwnb/backends/__init__.py).

A launcher decides where tasks listen and starts one process per task; the Run above it does
the bookkeeping (logs, status, failure policy) the same way whatever started the processes.
This module names no backend.
"""
from __future__ import annotations

import logging
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LaunchError
from ..task.tf_config import TaskId

__all__ = ["BOOTSTRAP", "LaunchError", "Launcher", "Sample", "TaskLaunch", "TaskProcess"]

BOOTSTRAP = str(Path(__file__).parents[1] / "task" / "bootstrap.py")  # started by path: see its docstring


@dataclass
class TaskLaunch:
    """Everything needed to start one task's process."""

    task: TaskId
    python: str
    script: str
    args: list[str]
    env: dict[str, str]
    cwd: str
    log_path: Path
    argv: list[str] = field(init=False)

    def __post_init__(self):
        self.argv = [self.python, "-u", BOOTSTRAP, self.script, *self.args]


@dataclass
class Sample:
    """One look at a task's processes."""

    rss: int  # bytes, the task's process and its children together
    stopped: bool  # SIGSTOPped (or traced): alive, but not running
    cpu: float = 0.0  # seconds of CPU (user + system) used so far, the process and its children


class TaskProcess(ABC):
    """A started task: enough to poll it and to end it."""

    pid: int | None
    warm = False  # started in an interpreter that had already imported TensorFlow (backends/warm.py)

    @abstractmethod
    def poll(self) -> int | None: ...

    @abstractmethod
    def signal(self, signum: int) -> None: ...

    def sample(self) -> "Sample | None":
        """The task's memory and state now, where this backend can see its processes (None if not)."""
        return None

    def signal_task(self, signum: int) -> None:
        """Signal the task's own process only, not its children (e.g. to ask it for its stacks)."""
        self.signal(signum)

    def signal_scope(self) -> object:
        """What one signal_task reaches: this task alone, or (a batch scheduler's job) all its tasks at once."""
        return self

    def tf_config(self) -> dict | None:
        """The TF_CONFIG the task made itself, where only it knows its address (a batch scheduler)."""
        return None

    def where(self) -> str:
        return f"pid {self.pid}"

    def fetch_files(self) -> None:
        """Bring what the task wrote into the run folder (its stacks, reports) here now, where its node does
        not share the folder; nothing to do where it does."""

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
    runs_here = False  # its tasks run on this machine, so the session's GPUs are theirs to share out
    # Options of its own, as (args, kwargs) for argparse and IPython's magic_arguments; each `dest`
    # is a keyword of the constructor. The option lists read a backend's declaration (catalog.py,
    # or a package's entry point), so that listing them imports no backend.
    arguments: tuple[tuple[tuple, dict], ...] = ()

    def check(self) -> None:
        """Raise LaunchError, before a run creates anything, if this way of starting cannot work here."""

    @abstractmethod
    def addresses(self, tasks: list[TaskId]) -> list[str] | None:
        """host:port for each task, in order; None if only the started tasks can know (see tf_config)."""

    @abstractmethod
    def start(self, launch: TaskLaunch) -> TaskProcess:
        """Start one task (also used to restart one)."""

    def start_all(self, launches: list[TaskLaunch]) -> list[TaskProcess]:
        """Start every task, or none: if one cannot start, those already started are stopped before the
        error goes up (an OSError, e.g. EAGAIN from fork, as a LaunchError naming the task)."""
        started: list[TaskProcess] = []
        try:
            for launch in launches:
                started.append(self.start(launch))
        except BaseException as error:
            stop_quietly(started)
            if isinstance(error, OSError):
                more = f"; stopped the {len(started)} already started" if started else ""
                raise LaunchError(f"could not start {launch.task}: {error}{more}") from error
            raise
        return started

    def take_notes(self) -> list[str]:
        """What the user should know about how the tasks were started (said once, at launch)."""
        return []

    def finish(self) -> list[str]:
        """Called once every task has ended: tidy up, and say what the user should know (why a job ended)."""
        return []


def stop_quietly(processes: list[TaskProcess], grace: float = 1.0) -> None:
    """Stop what a failed launch started (nothing has run for long: a short grace), each whatever the others do."""
    for process in processes:
        try:
            process.stop(grace)
        except Exception:  # one that cannot be signalled must not keep the others running
            logging.getLogger("kwnb.backends").warning("could not stop %s", process.where(), exc_info=True)
