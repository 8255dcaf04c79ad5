"""What a run's folder keeps of the run, so that `kwnb.open_run` (engine/records/past.py) and the exports can
show or launch it after the kernel that ran it is gone.

run.json is written twice: when the run is made, what was launched (`record_description`: RunDescription,
kwnb/task/runfolder.py), and when it ends, how it went under "result" (`record_result`: the fields of the run's
snapshot, its tasks and its diagnoses that are tagged `kept`: status, start and end, the reason and notes,
each task's exit code, phases and peak memory, the diagnoses standing at the end and every one ever made).
The metric rows and each task's log tail (the lines views showed, with which are TensorFlow runtime lines) go
into history.json, kept apart: up to 20,000 step rows and 300 lines per task would slow every `%kw_runs`
listing, which reads each run.json. Both go through runfolder's one writer, which replaces a file atomically
(a temporary file, then rename): a kernel killed mid-write leaves the previous file whole.

What is kept is declared where it is defined (TaskView, RunSnapshot, Diagnosis, RunDescription): a new fact
kept is one tagged field there, written by `kept_of` and read back by `read_kept`, which walk the tags.
"""
from __future__ import annotations

import json
import time

from ...task.runfolder import (HISTORY, RUN_JSON_FORMAT, RunDescription, RunFolder, kept_of, write_description,
                               write_private_json)

__all__ = ["HISTORY", "record_description", "record_result", "write_result"]


def record_description(run) -> None:
    """run.json as the run is made (engine/live/run.py): what was launched, enough to launch it again."""
    write_description(run.dir, RunDescription(
        dir=run.dir, name=run.name, script=run.script.name, args=run.args,
        tasks=[(task.type, task.index) for task in run.task_ids], env=run.user_env,
        files=[path.name for path in run.files if path.is_file()], gpus=run.gpus, python=run.python,
        cwd=str(run.cwd), backend=run.launcher.name, framework=run.framework.name, created=time.strftime("%Y-%m-%dT%H:%M:%S%z")).as_json())


def record_result(run) -> None:
    """An on_end callback of every Run: the result into run.json, the rows into history.json."""
    write_result(run.snapshot())


def write_result(snapshot) -> None:
    folder = RunFolder(snapshot.dir)
    description = json.loads(folder.description.read_text(encoding="utf-8"))
    description.update({"format": RUN_JSON_FORMAT, "result": kept_of(snapshot)})
    write_description(snapshot.dir, description)
    rows = {"tasks": [kept_of(task, HISTORY) for task in snapshot.tasks]}
    write_private_json(folder.path / HISTORY, rows, indent=None)  # compact: up to 20,000 step rows a task
