"""Reading a run: its tasks by position or name, and their logs.

A base of the learner's Run (engine/live/run.py) and of a past run (past.py), which each read their rows
their own way (a live run under its engine's state lock, a past run from its snapshot); everything here
only reads, and takes no lock.
"""
from __future__ import annotations

import contextlib

from ...errors import UnknownTask
from ...task.tf_config import TaskId
from .compat import RunAliases, task_keyword
from ..tasks.task import Task


class RunReading(RunAliases):
    workers: list[Task]
    name: str

    def _reading_lock(self):
        """What guards a live task's reader while `logs` reads it: nothing for a past run, whose tasks have
        none; the learner's Run gives its engine's state lock."""
        return contextlib.nullcontext()

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
        `tail` keeps only the last lines. The file itself keeps every byte.

        Read from what the task's reader kept as it went (its `.screen` file, each line marked once as a
        runtime line or not), never from the log itself; a live task's line still being drawn is added."""
        from ...task.runfolder import RunFolder
        from ..readers.output import TaskOutput, read_kept

        chosen = self.task(task)
        reader = getattr(chosen, "output", None)  # a live task's reader; a past run's tasks are TaskViews
        if reader is not None:
            with self._reading_lock():
                written, drawing = reader.kept_lines, reader.drawing()
        else:
            written, drawing = None, None
        rows = read_kept(RunFolder(chosen.log_path.parent).screen(chosen.id.type, chosen.id.index), written)
        if rows is None:  # a folder an older kwnb wrote, with no .screen: its log, read once by the same reader
            output = TaskOutput(chosen.log_path, keep=None)
            output.feed_file()
            shown, runtime = output.tail()
            folded = set(runtime)
            rows = [(line, place in folded) for place, line in enumerate(shown)]
        lines = [line for line, folded in rows + ([drawing] if drawing else []) if all or not folded]
        return "\n".join(lines[-tail:] if tail else lines)
