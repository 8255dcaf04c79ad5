"""The statuses of a task and of a run, and the phases of a task, named once.

str-valued, so that `task.status == "failed"`, a dict keyed by the plain words (the dashboard's
colours) and run.json keep working; `str()` and f-strings give the plain word too.
"""
from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    PENDING = "pending"  # waiting for a scheduler to give it a machine
    STARTING = "starting"  # started, nothing heard from it yet
    RUNNING = "running"
    FINISHED = "finished"  # exited 0 (a run: every task did)
    FAILED = "failed"  # exited otherwise, not because kwnb stopped it (a run: a task failed, or it timed out)
    STOPPED = "stopped"  # kwnb or the user stopped it

    __str__ = str.__str__  # "failed", not "Status.FAILED", whatever the Python version
    __format__ = str.__format__

    @property
    def ended(self) -> bool:
        return self in ENDED


ENDED = (Status.FINISHED, Status.FAILED, Status.STOPPED)


def task_status(current: Status, returncode: int | None, stop_requested: bool, serving: bool, queued: bool) -> Status:
    """A task's status, decided here alone. Once it exited: stopped if kwnb ended it, else finished (exit 0) or
    failed. Until then: running once it serves or prints (`serving`), before that pending while a scheduler
    keeps it `queued`, else starting; a task that ran never goes back to starting."""
    if returncode is not None:
        return Status.STOPPED if stop_requested else Status.FINISHED if returncode == 0 else Status.FAILED
    if current not in (Status.STARTING, Status.PENDING):
        return current
    return Status.RUNNING if serving else Status.PENDING if queued else Status.STARTING


class Phase(str, Enum):
    """What a task is doing (engine/tasks/vitals.py says how each is told apart); its ended ones are its status."""

    PENDING = "pending"  # queued by a scheduler
    STARTING = "starting"  # the interpreter, the imports, the script's set-up: no TensorFlow server yet
    JOINING = "joining"  # its server is up and it waits for its peers
    SERVING = "serving"  # a parameter-server job's worker or ps, its server up: it serves, never joins (docs/roles.md)
    TRAINING = "training"
    FINISHING = "finishing"  # its last epoch is done and it is shutting down
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"

    __str__ = str.__str__
    __format__ = str.__format__
