"""Reading a run: its tasks by position or name, and their logs.

A base of the learner's Run (engine/live/run.py) and of a past run (past.py), which each read their rows
their own way (a live run under its engine's state lock, a past run from its snapshot); everything here
only reads, and takes no lock.
"""
from __future__ import annotations

from ...errors import UnknownTask
from ...task.tf_config import TaskId
from .compat import RunAliases, task_keyword
from ..tasks.task import Task


class RunReading(RunAliases):
    workers: list[Task]
    name: str

    def task(self, ref: int | str | TaskId = 0) -> Task:
        """A task by position in the run (0 is the chief) or by name: 'ps:0', 'worker 1', a TaskId."""
        if isinstance(ref, int) and not isinstance(ref, bool):
            if 0 <= ref < len(self.workers):
                return self.workers[ref]
        elif isinstance(ref, (str, TaskId)):
            try:
                wanted = TaskId.parse(ref) if isinstance(ref, str) else ref
            except ValueError as error:
                raise UnknownTask(str(error)) from None
            for task in self.workers:
                if task.id == wanted:
                    return task
        names = ", ".join(task.name for task in self.workers)
        raise UnknownTask(f"run {self.name!r} has tasks 0 to {len(self.workers) - 1}, not {ref!r} (by name: {names})")

    @task_keyword
    def logs(self, task: int | str = 0, tail: int | None = None, *, all: bool = False) -> str:
        """A task's log as a terminal shows it, without TensorFlow's runtime lines unless `all`;
        `tail` keeps only the last lines. The file itself keeps every byte."""
        from ..readers.output import TaskOutput

        output = TaskOutput(self.task(task).log_path, keep=None)  # every line, through the reader the run has
        output.feed_file()
        lines, runtime = output.tail()
        folded = () if all else set(runtime)
        lines = [line for place, line in enumerate(lines) if place not in folded]
        return "\n".join(lines[-tail:] if tail else lines)

