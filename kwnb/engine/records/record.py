"""What a run's folder keeps of how the run went, so that `kwnb.open_run` (engine/records/past.py) can show it
after the kernel that ran it is gone.

When the run ends, its snapshot (engine/records/snapshot.py) is written into run.json under "result"
(status, start and end, the reason and notes, each task's exit code, phases and peak memory, the
diagnoses standing at the end and every one ever made) and its metric rows and each task's log tail (the
lines views showed, with which are TensorFlow runtime lines) into history.json (kept apart: up to 20,000
step rows and 300 lines per task would slow every `%kw_runs` listing, which reads each run.json). Both are replaced atomically (a temporary file, then rename), so a kernel killed
mid-write leaves the previous file whole.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ...task.runfolder import RUN_JSON_FORMAT, RunFolder

HISTORY = "history.json"


def record_result(run) -> None:
    """An on_end callback of every Run: the result into run.json, the rows into history.json."""
    write_result(run.snapshot())


def write_result(snapshot) -> None:
    folder = RunFolder(snapshot.dir)
    description = json.loads(folder.description.read_text(encoding="utf-8"))
    description.update({"format": RUN_JSON_FORMAT, "result": result_of(snapshot)})
    write_json(folder.description, description)
    rows = {"tasks": [{"epochs": list(task.epochs), "steps": list(task.steps), "steps_per_epoch": task.steps_per_epoch,
                       "tail": list(task.tail), "tail_runtime": list(task.tail_runtime)} for task in snapshot.tasks]}
    write_json(folder.path / HISTORY, rows, indent=None)  # compact: up to 20,000 step rows a task


def result_of(snapshot) -> dict:
    return {
        "status": snapshot.status, "started_at": snapshot.started_at, "ended_at": snapshot.ended_at,
        "elapsed": snapshot.elapsed, "restarts": snapshot.restarts,
        "user_restarts": snapshot.user_restarts, "reason": snapshot.reason,
        "notes": list(snapshot.notes), "diagnoses": [diagnosis_record(d) for d in snapshot.diagnoses],
        "diagnosis_history": [diagnosis_record(d) for d in snapshot.diagnosis_history],
        "tasks": [task_record(task) for task in snapshot.tasks],
    }


def task_record(task) -> dict:
    return {
        "position": task.position, "type": task.id.type, "index": task.id.index, "is_chief": task.is_chief,
        "status": task.status, "phase": task.phase, "returncode": task.returncode, "pid": task.pid,
        "where": task.where, "address": task.address, "started_at": task.started_at, "ended_at": task.ended_at,
        "elapsed": task.elapsed, "restarts": task.restarts, "warm": task.warm,
        "phases": [[at, phase] for at, phase in task.phases], "runtime_lines": task.runtime_lines,
        "total_lines": task.total_lines, "progress": list(task.progress), "peak_rss": task.peak_rss,
        "rate": task.rate, "time_in": dict(task.time_in),
    }


def diagnosis_record(diagnosis) -> dict:
    return {"kind": diagnosis.kind, "task": diagnosis.task, "message": diagnosis.message, "since": diagnosis.since,
            "evidence": list(diagnosis.evidence)}


def write_json(path: Path, data: dict, indent: int | None = 1) -> None:
    """Private (0600, like run.json, which may hold secrets in its env) and atomic."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(os.open(temporary, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600), "w") as handle:
        handle.write(json.dumps(data, indent=indent) + "\n")  # dumps: json.dump never uses the C encoder
    os.replace(temporary, path)
