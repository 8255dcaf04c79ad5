"""Reading a run: its tasks by position or name, their per-epoch and per-step rows, their logs.

A base of Run (engine/live/run.py), which keeps the life cycle; everything here only reads, and takes
the state lock (Run._lock) only to copy what the supervisor is changing.
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
    def history(self, task: int | str = 0) -> list[dict]:
        """Per-epoch rows of one task (the chief by default): {'epoch': 0, 'loss': ..., ...}.

        `task` is a position in the run or a name like 'worker:1'."""
        chosen = self.task(task)
        with self._lock:
            return [dict(row) for row in chosen.metrics.history()]

    @task_keyword
    def step_history(self, task: int | str = 0) -> list[dict]:
        """Per-step rows where the output gives them (Keras verbose=1, or kwnb.report(step=...))."""
        chosen = self.task(task)
        with self._lock:
            return [dict(row) for row in chosen.metrics.steps]

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
            with self._lock:
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
