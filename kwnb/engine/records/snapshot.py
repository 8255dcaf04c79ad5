"""What views show of a run, as one immutable copy: the dashboard, the summary, the overview and the
timeline render from a RunSnapshot and never from the live Run.

Two sources, one shape: `Run.snapshot()` copies a live run under its state lock (a few hundred
microseconds: lists of references, no I/O), so that rendering (HTML, PNG) holds no lock at all;
`kwnb.open_run()` (engine/records/past.py) reads a finished run's folder into the same type, so a past
run is drawn by the same renderers as the live one.

Rows (epochs, steps) are shared, not copied: the metrics parser replaces a row, never changes one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ...task.runfolder import RunFolder, kept
from ..diagnoses.diagnosis import Diagnosis
from ..tasks.view import LOG_LINES, TaskView, view_of  # (LOG_LINES, TaskView: past.py and views import them from here)

@dataclass(frozen=True)
class RunSnapshot:
    """A run at one moment (live) or as its folder recorded it (past); `missing` says what a past
    run's folder could not tell (an older kwnb wrote it, or the kernel ended before the run).

    The fields tagged `kept` are run.json's "result", written when the run ends (engine/records/record.py)
    and read back by a past run (engine/records/past.py); each task's are tagged in TaskView."""

    name: str
    dir: Path
    status: str = kept()
    done: bool
    tasks: tuple = kept(each=TaskView)
    started_at: float | None = kept(None)
    ended_at: float | None = kept(None)
    elapsed: float = kept(0.0, read=lambda value: value or 0.0)  # a run that never started: null
    restarts: int = kept(0)  # the failure policy's cluster restarts
    user_restarts: int = kept(0)  # tasks the user restarted (%kw_restart)
    reason: str = kept("")
    notes: tuple = kept((), read=tuple)
    diagnoses: tuple = kept((), each=Diagnosis)
    diagnosis_history: tuple = kept((), each=Diagnosis)
    past: bool = False
    missing: tuple = ()
    taken_at: float = 0.0

    @property
    def workers(self) -> tuple:
        return self.tasks

    @property
    def chief(self) -> TaskView:
        return self.tasks[0]

    @property
    def exit_codes(self) -> list[int | None]:
        return [task.returncode for task in self.tasks]

    @property
    def folder(self) -> RunFolder:
        return RunFolder(self.dir)

    @property
    def curves_path(self) -> Path | None:
        return self.folder.curves if self.folder.curves.is_file() else None

    @property
    def timeline_path(self) -> Path | None:
        return self.folder.timeline if self.folder.timeline.is_file() else None

    @property
    def warm(self) -> bool:
        return all(task.warm for task in self.tasks)

    def history(self, task: int = 0) -> list[dict]:
        return [dict(row) for row in self.tasks[task].epochs]

    def step_history(self, task: int = 0) -> list[dict]:
        return [dict(row) for row in self.tasks[task].steps]


def as_snapshot(source) -> RunSnapshot:
    """A RunSnapshot from a snapshot, a Run or a past run: what every renderer starts with."""
    return source if isinstance(source, RunSnapshot) else source.snapshot()


def copy_diagnosis(diagnosis: Diagnosis) -> Diagnosis:
    """The supervisor updates a standing diagnosis's message in place: a view gets its own copy."""
    return diagnosis.copy()


def snapshot_of_run(run, where: list[str]) -> RunSnapshot:
    """A live run (engine/live/run.py) as views show it; called under its state lock by Run.snapshot(), with
    where each task runs (`where`, looked up before: under Slurm it may read a file)."""
    now = time.time()
    gpus = run.gpu_placement.devices if run.gpu_placement else [""] * len(run.workers)
    tasks = tuple(view_of(task, now, place, gpu) for task, place, gpu in zip(run.workers, where, gpus))
    ended = all(task.returncode is not None for task in tasks) and run.ended_at is not None
    return RunSnapshot(
        name=run.name, dir=run.dir, status=run.status, done=run.done or ended, tasks=tasks,
        started_at=run.started_at, ended_at=run.ended_at, elapsed=run.elapsed, restarts=run.restarts,
        user_restarts=run.user_restarts, reason=run.reason, notes=tuple(run.notes), diagnoses=tuple(map(copy_diagnosis, run.diagnoses)),
        diagnosis_history=tuple(map(copy_diagnosis, run.diagnosis_history)), taken_at=now)
