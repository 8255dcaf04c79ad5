"""One task at one moment, as an immutable value: what the views show, the failure policy decides from
(engine/live/policy.py) and the diagnoses read (engine/diagnoses/). One shape for all three, so that a
task is copied once per look and every reader sees the same facts.

A live task is copied by `view_of` under its run's state lock (lists of references and a copy of its
signals, no I/O); a past run's folder is read into the same type (engine/records/past.py).

What a run's folder keeps of a task is tagged here, field by field (`kept`, kwnb/task/runfolder.py): into
run.json's "result" when the run ends, or into history.json (`into=HISTORY`: the rows and the log tail, too
big for run.json, which every `%kw_runs` listing reads). A past run reads the same fields back; `missing` is
what it shows of a field a folder lacks (an older kwnb wrote it).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...task.runfolder import HISTORY, REQUIRED, kept
from ...task.tf_config import TaskId
from .roles import is_sidecar
from .task import Named, Signals
from .vitals import last_step

if TYPE_CHECKING:
    from .task import Task

LOG_LINES = 300  # the log tail a view shows (the dashboard's tab); the file keeps every line


@dataclass(frozen=True)
class TaskView(Named):
    """One task as views, the policy and the diagnoses read it (the fields they used to read from Task)."""

    position: int = kept(missing=None)  # a past run takes it from run.json's task list
    id: TaskId = kept(flat=TaskId)  # kept as its type and index
    is_chief: bool = kept(missing=None)  # unknown: engine/tasks/roles.py decides, as it did for the live run
    status: str = kept(missing="unknown")
    phase: str = kept(missing="unknown")
    returncode: int | None = kept(None)
    pid: int | None = kept(None)
    where: str = kept("")  # where it runs: a pid here, a job and node under a scheduler
    gpu: str = kept("")  # its CUDA_VISIBLE_DEVICES, where --gpus placed it (engine/live/gpu_placement.py)
    address: str = kept("")
    started_at: float | None = kept(None)
    ended_at: float | None = kept(None)
    elapsed: float = kept(0.0, read=lambda value: value or 0.0)  # a task that never started: null
    restarts: int = kept(0)
    warm: bool = kept(False)
    alive: bool = False
    # (time it began, phase), across restarts
    phases: tuple = kept((), read=lambda pairs: tuple((at, phase) for at, phase in pairs))
    # the last lines as a terminal shows them, the unfinished one included (a folder without them: None)
    tail: tuple = kept((), into=HISTORY, missing=None, read=tuple)
    tail_runtime: tuple = kept((), into=HISTORY, read=tuple)  # which lines of `tail` (their places) are runtime lines
    total_lines: int = kept(0)  # lines the log has on screen so far, the tail's included
    runtime_lines: int = kept(0)  # TensorFlow's C++ runtime lines among them
    log_path: Path | None = None
    progress: tuple = kept((None, ""), missing=(), read=tuple)  # (fraction done or None, "epoch 2/5, step 30/100")
    epochs: tuple = kept((), into=HISTORY, missing=REQUIRED, read=tuple)  # per-epoch rows, in epoch order
    steps: tuple = kept((), into=HISTORY, missing=REQUIRED, read=tuple)  # per-step rows
    steps_per_epoch: int | None = kept(None, into=HISTORY)
    cpu_percent: float | None = None
    rss: int = 0
    peak_rss: int = kept(0)
    rate: float | None = kept(None)  # steps per second, recent (live) or over the time spent training (ended)
    time_in: dict = kept({}, read=dict)  # seconds spent in each phase, all attempts together
    # What the diagnoses and the policy read besides (a past run's folder does not keep them: the defaults)
    epoch: int | None = None  # the epoch in progress (0-based), as the output printed it
    step: int | None = None  # the step within it (1-based)
    total_epochs: int | None = None
    nonfinite: dict | None = None  # the first metric row with a NaN or infinite value
    signals: Signals = field(default_factory=Signals)  # a copy: what TensorFlow said, for the diagnoses
    stop_requested: bool = False  # kwnb or the user is stopping it: its end is no mystery
    killed_by_kwnb: bool = False  # %kw_kill, Run.kill
    joined_before: bool = False  # an earlier attempt joined a cluster (its signals are this attempt's)

    @property
    def task_type(self) -> str:
        return self.id.type

    @property
    def index(self) -> int:
        return self.id.index

    @property
    def training(self) -> bool:
        """False for a sidecar (an evaluator): its failure is not training's (engine/tasks/roles.py)."""
        return not is_sidecar(self)

    @property
    def bind_failed(self) -> bool:
        """TensorFlow could not bind its port."""
        return self.signals.bind_failure is not None

    @property
    def own_tf_config(self) -> bool:
        """The script set TF_CONFIG itself: a relaunch on new ports would not help."""
        return self.signals.tf_config_set is not None

    def __repr__(self) -> str:
        """One line, as a live Task's: the generated one printed every log line and metric row."""
        code = "" if self.returncode is None else f" exit {self.returncode}"
        return f"<TaskView {self.task_type} {self.index} pid={self.pid} {self.status}{code}>"


def view_of(task: "Task", now: float, where: str = "", gpu: str = "") -> TaskView:
    """A live task as a value; called under its run's state lock, with where it runs looked up before
    (under Slurm that may read a file)."""
    vitals, metrics = task.vitals, task.metrics
    tail, tail_runtime = task.output.tail(LOG_LINES)
    signals = copy.copy(task.signals)
    signals.peer_reports = tuple(signals.peer_reports)  # the one field the supervisor changes in place
    return TaskView(
        position=task.position, id=task.id, is_chief=task.is_chief, status=task.status, phase=task.phase,
        returncode=task.returncode, pid=task.pid, where=where, gpu=gpu, address=task.address,
        started_at=task.started_at, ended_at=task.ended_at, elapsed=task.elapsed, restarts=task.restarts,
        warm=task.warm, alive=task.alive, phases=tuple(vitals.phases), tail=tail, tail_runtime=tail_runtime,
        total_lines=task.output.total_lines, runtime_lines=task.runtime_lines,
        log_path=task.log_path, progress=metrics.progress(), epochs=tuple(metrics.history()),
        steps=tuple(metrics.steps), steps_per_epoch=metrics.steps_per_epoch, cpu_percent=vitals.cpu_percent,
        rss=vitals.rss, peak_rss=task.signals.peak_rss, time_in=vitals.time_in(until=task.ended_at or now),
        rate=vitals.rate if task.alive else vitals.mean_rate(task.ended_at, last_step(metrics.steps)),
        epoch=metrics.epoch, step=metrics.step, total_epochs=metrics.total_epochs, nonfinite=metrics.nonfinite,
        signals=signals, stop_requested=task.stop_requested, killed_by_kwnb=task.killed_by_kwnb,
        joined_before=task.joined_before)
