"""What a run's folder keeps of how the run went, so that `kwnb.open_run` (engine/records/past.py) can show it
after the kernel that ran it is gone.

When the run ends, its snapshot (engine/records/snapshot.py) is written into run.json under "result"
(status, start and end, the reason and notes, each task's exit code, phases and peak memory, the
diagnoses standing at the end and every one ever made) and its metric rows and each task's log tail (the
lines views showed, with which are TensorFlow runtime lines) into history.json (kept apart: up to 20,000
step rows and 300 lines per task would slow every `%kw_runs` listing, which reads each run.json). Both
are replaced atomically (a temporary file, then rename), so a kernel killed mid-write leaves the
previous file whole.

What is kept is declared once, as the fields of RunResult, TaskRecord, DiagnosisRecord and TaskRows:
writing walks them (`record_of`, reading each from the snapshot) and reading walks them back
(`read_record`), where a field an older folder lacks takes its default. A new field is one line here.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from ...task.runfolder import RUN_JSON_FORMAT, RunFolder

HISTORY = "history.json"


def saved(default=dataclasses.MISSING, *, source: str = "", read=None, each: type | None = None):
    """A kept field: `source` names the snapshot's attribute when it is not the field's name, `read`
    turns JSON's value back (a list into a tuple), `each` is the record type of every item of a list."""
    metadata = {"source": source, "read": read, "each": each}
    if isinstance(default, (list, dict)):  # an empty one: a fresh one for each record, as dataclasses want
        return field(default_factory=type(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _zero_if_null(value):
    return value or 0.0  # a task that never started has no elapsed time (null)


def _pairs(value) -> tuple:
    return tuple((at, phase) for at, phase in value)


@dataclass(frozen=True, kw_only=True)
class DiagnosisRecord:
    """A diagnosis (engine/diagnoses/diagnosis.py) as kept."""

    kind: str
    task: int | None = None
    message: str
    since: float = 0.0
    evidence: list = saved([], read=list)
    cause: str = ""  # a task's end in words, and the attempt it ended (engine/diagnoses/recovery.py)
    attempt: int = 0
    recovered: bool = False  # an end the run recovered from


@dataclass(frozen=True, kw_only=True)
class TaskRecord:
    """One task as kept (from its TaskView, engine/records/snapshot.py)."""

    position: int | None = None  # a past run takes it from run.json's task list
    type: str = saved(source="task_type")
    index: int
    is_chief: bool | None = None  # unknown: engine/tasks/roles.py decides, as it did for the live run
    status: str = "unknown"
    phase: str = "unknown"
    returncode: int | None = None
    pid: int | None = None
    where: str = ""
    gpu: str = ""  # the GPUs --gpus gave it (CUDA_VISIBLE_DEVICES), "" for none
    address: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    elapsed: float = saved(0.0, read=_zero_if_null)
    restarts: int = 0
    warm: bool = False
    phases: tuple = saved((), read=_pairs)  # (time it began, phase)
    runtime_lines: int = 0
    total_lines: int = 0
    progress: tuple = saved((), read=tuple)  # (fraction done or None, "epoch 2/5, step 30/100")
    peak_rss: int = 0
    rate: float | None = None
    time_in: dict = saved({}, read=dict)


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """run.json's "result": how the run went."""

    status: str
    started_at: float | None = None
    ended_at: float | None = None
    elapsed: float = saved(0.0, read=_zero_if_null)
    restarts: int = 0
    user_restarts: int = 0
    reason: str = ""
    notes: tuple = saved((), read=tuple)
    diagnoses: tuple = saved((), each=DiagnosisRecord)
    diagnosis_history: tuple = saved((), each=DiagnosisRecord)
    tasks: tuple = saved(each=TaskRecord)


@dataclass(frozen=True, kw_only=True)
class TaskRows:
    """One task's metric rows, as history.json keeps them."""

    epochs: tuple = saved(read=tuple)
    steps: tuple = saved(read=tuple)
    steps_per_epoch: int | None = None
    tail: tuple | None = saved(None, read=tuple)  # the log's last lines as views showed them (None: not kept)
    tail_runtime: tuple = saved((), read=tuple)  # which of them are TensorFlow runtime lines (their places)


def record_of(kind: type, source) -> dict:
    """What run.json keeps of `source` (a snapshot, a task's view, a diagnosis): each field of `kind`."""
    kept = {}
    for item in fields(kind):
        value = getattr(source, item.metadata.get("source") or item.name)
        each = item.metadata.get("each")
        kept[item.name] = [record_of(each, one) for one in value] if each else value
    return kept


def read_record(kind: type, data: dict):
    """A `kind` from what record_of wrote; a field `data` lacks (an older kwnb wrote it) takes its default."""
    if not isinstance(data, dict):
        raise TypeError(f"{kind.__name__} is {type(data).__name__}, not an object")
    required = [item.name for item in fields(kind)
                if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING]
    for name in required:
        if name not in data:
            raise KeyError(name)  # every kwnb that wrote a result wrote these
    return kind(**{item.name: _read_value(item, data[item.name]) for item in fields(kind) if item.name in data})


def _read_value(item: dataclasses.Field, value):
    each, read = item.metadata.get("each"), item.metadata.get("read")
    if each:
        return tuple(read_record(each, one) for one in value)
    return read(value) if read else value


def record_result(run) -> None:
    """An on_end callback of every Run: the result into run.json, the rows into history.json."""
    write_result(run.snapshot())


def write_result(snapshot) -> None:
    folder = RunFolder(snapshot.dir)
    description = json.loads(folder.description.read_text(encoding="utf-8"))
    description.update({"format": RUN_JSON_FORMAT, "result": record_of(RunResult, snapshot)})
    write_json(folder.description, description)
    rows = {"tasks": [record_of(TaskRows, task) for task in snapshot.tasks]}
    write_json(folder.path / HISTORY, rows, indent=None)  # compact: up to 20,000 step rows a task


def write_json(path: Path, data: dict, indent: int | None = 1) -> None:
    """Private (0600, like run.json, which may hold secrets in its env) and atomic."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(os.open(temporary, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600), "w") as handle:
        handle.write(json.dumps(data, indent=indent) + "\n")  # dumps: json.dump never uses the C encoder
    os.replace(temporary, path)
