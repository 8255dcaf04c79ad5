"""What views show of a run, as one immutable copy: the dashboard, the summary, the overview and the
timeline render from a RunSnapshot and never from the live Run.

Two sources, one shape: `Run.snapshot()` copies a live run under its state lock (a few hundred
microseconds: lists of references, no I/O), so that rendering (HTML, PNG) holds no lock at all;
`kwnb.open_run()` (engine/records/past.py) reads a finished run's folder into the same type, so a past
run is drawn by the same renderers as the live one.

Rows (epochs, steps) are shared, not copied: the metrics parser replaces a row, never changes one.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...task.runfolder import RunFolder
from ...task.tf_config import TaskId
from ..diagnoses.diagnosis import Diagnosis
from ..tasks.task import task_label

LOG_LINES = 300  # the log tail a view shows (the dashboard's tab); the file keeps every line


@dataclass(frozen=True)
class TaskView:
    """One task as views show it (the fields views used to read from engine/tasks/task.py's Task)."""

    position: int
    id: TaskId
    is_chief: bool
    status: str
    phase: str
    returncode: int | None = None
    pid: int | None = None
    where: str = ""
    gpu: str = ""  # its CUDA_VISIBLE_DEVICES, where --gpus placed it (engine/live/gpu_placement.py)
    address: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    elapsed: float = 0.0
    restarts: int = 0
    warm: bool = False
    alive: bool = False
    phases: tuple = ()  # (time it began, phase), across restarts
    tail: tuple = ()  # the last lines as a terminal shows them, the unfinished one included
    tail_runtime: tuple = ()  # which lines of `tail` (their places in it) are TensorFlow runtime lines
    total_lines: int = 0  # lines the log has on screen so far, the tail's included
    runtime_lines: int = 0  # TensorFlow's C++ runtime lines among them
    log_path: Path | None = None
    progress: tuple = (None, "")  # (fraction done or None, "epoch 2/5, step 30/100")
    epochs: tuple = ()  # per-epoch rows, in epoch order
    steps: tuple = ()  # per-step rows
    steps_per_epoch: int | None = None
    cpu_percent: float | None = None
    rss: int = 0
    peak_rss: int = 0
    rate: float | None = None  # steps per second, recent (live) or over the time spent training (ended)
    time_in: dict = field(default_factory=dict)  # seconds spent in each phase, all attempts together

    @property
    def task_type(self) -> str:
        return self.id.type

    @property
    def index(self) -> int:
        return self.id.index

    @property
    def name(self) -> str:
        return f"{self.id.type}:{self.id.index}"

    @property
    def label(self) -> str:
        return task_label(self.id, self.is_chief)

    def __repr__(self) -> str:
        """One line, as a live Task's: the generated one printed every log line and metric row."""
        code = "" if self.returncode is None else f" exit {self.returncode}"
        return f"<TaskView {self.task_type} {self.index} pid={self.pid} {self.status}{code}>"


@dataclass(frozen=True)
class RunSnapshot:
    """A run at one moment (live) or as its folder recorded it (past); `missing` says what a past
    run's folder could not tell (an older kwnb wrote it, or the kernel ended before the run)."""

    name: str
    dir: Path
    status: str
    done: bool
    tasks: tuple
    started_at: float | None = None
    ended_at: float | None = None
    elapsed: float = 0.0
    restarts: int = 0  # the failure policy's cluster restarts
    user_restarts: int = 0  # tasks the user restarted (%kw_restart)
    reason: str = ""
    notes: tuple = ()
    diagnoses: tuple = ()
    diagnosis_history: tuple = ()
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
    return dataclasses.replace(diagnosis, evidence=list(diagnosis.evidence))


def view_of_task(task, now: float, where: str = "", gpu: str = "") -> TaskView:
    """A live task (engine/tasks/task.py) as views show it; called under the run's state lock."""
    vitals, metrics = task.vitals, task.metrics
    tail, tail_runtime = task.output.tail(LOG_LINES)
    rate = vitals.rate if task.alive else vitals.mean_rate(task)
    return TaskView(
        position=task.position, id=task.id, is_chief=task.is_chief, status=task.status, phase=task.phase,
        returncode=task.returncode, pid=task.pid, where=where, gpu=gpu, address=task.address,
        started_at=task.started_at, ended_at=task.ended_at, elapsed=task.elapsed, restarts=task.restarts,
        warm=task.warm, alive=task.alive, phases=tuple(vitals.phases), tail=tail,
        tail_runtime=tail_runtime, total_lines=task.output.total_lines, runtime_lines=task.runtime_lines,
        log_path=task.log_path, progress=metrics.progress(), epochs=tuple(metrics.history()),
        steps=tuple(metrics.steps), steps_per_epoch=metrics.steps_per_epoch, cpu_percent=vitals.cpu_percent,
        rss=vitals.rss, peak_rss=task.signals.peak_rss, rate=rate, time_in=vitals.time_in(until=task.ended_at or now))


def snapshot_of_run(run, where: list[str]) -> RunSnapshot:
    """A live run (engine/live/run.py) as views show it; called under its state lock by Run.snapshot(), with
    where each task runs (`where`, looked up before: under Slurm it may read a file)."""
    now = time.time()
    gpus = run.gpu_placement.devices if run.gpu_placement else [""] * len(run.workers)
    tasks = tuple(view_of_task(task, now, place, gpu) for task, place, gpu in zip(run.workers, where, gpus))
    ended = all(task.returncode is not None for task in tasks) and run.ended_at is not None
    return RunSnapshot(
        name=run.name, dir=run.dir, status=run.status, done=run.done or ended, tasks=tasks,
        started_at=run.started_at, ended_at=run.ended_at, elapsed=run.elapsed, restarts=run.restarts,
        user_restarts=run.user_restarts, reason=run.reason, notes=tuple(run.notes), diagnoses=tuple(map(copy_diagnosis, run.diagnoses)),
        diagnosis_history=tuple(map(copy_diagnosis, run.diagnosis_history)), taken_at=now)
