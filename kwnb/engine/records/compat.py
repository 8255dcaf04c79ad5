"""The names earlier versions used for a task's identity, kept working and gathered here so that
the rest of the code uses one name for each thing.

    Run.workers        the run's tasks (ps and chief ones too): kept as the main name, as the docs and
                       every notebook use it; `Run.tasks` is the same list
    Run.worker(ref)    Run.task(ref)
    kwnb.Worker        kwnb.Task (a run's tasks include ps and chief tasks, not only workers)
    index=             task= (a position or a name) in history, step_history and logs
    KWNB_WORKER        the environment variable a task finds its position in (0 is the chief):
                       kept under that name, not renamed, since scripts may read it
                       (kwnb/task/runfolder.py: POSITION_ENV, on the task's side, standard library only)
"""
from __future__ import annotations

import functools
from typing import Callable

CLASS_ALIASES = {"Worker": "Task"}  # kwnb.<old name> -> kwnb.<name> (kwnb/__init__.py)


def task_keyword(method: Callable) -> Callable:
    """Accept `index=` (the old name) for the method's `task` argument."""
    @functools.wraps(method)
    def wrapper(self, *args, index=None, **kwargs):
        if index is not None:
            if args or "task" in kwargs:
                raise TypeError(f"{method.__name__}() takes task= or its old name index=, not both")
            kwargs["task"] = index
        return method(self, *args, **kwargs)
    return wrapper


class RunAliases:
    """Old names of Run's task accessors (a base of Run, through RunReading)."""

    workers: list

    @property
    def tasks(self) -> list:
        """Every task of the run, chief first; the same list as `workers` (which includes ps tasks too)."""
        return self.workers

    def worker(self, ref=0):
        """The same as `task(ref)`: the name of earlier versions."""
        return self.task(ref)
