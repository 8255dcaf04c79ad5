"""The names a Run showed before the learner's Run and the engine's side were apart: the engine's own steps and
locks, its plumbing, and copies of the launch options (run.timeout, now run.settings.timeout). Notebooks and
saved code that use one keep working: `Run.__getattr__` (run.py) reads it from the run's engine side
(run_engine.py) with a DeprecationWarning that says what to use instead, shown where a notebook's cell uses
it; none of them is in `dir(run)`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .settings import LaunchSettings

KWNB_DOES_IT = "there is nothing to call: kwnb's supervisor does it, and run.wait() returns once it has"
PRINT_IT = "print what an on_end callback has to tell (the run's notes are kwnb's)"
A_CONSISTENT_COPY = "use run.snapshot(), a consistent copy of the run taken under kwnb's lock"


@dataclass(frozen=True)
class Former:
    """Where a former name's value is on the engine side (`path`, dotted), and what a learner uses instead."""

    path: str
    instead: str

    def read(self, engine):
        value = engine
        for part in self.path.split("."):
            value = getattr(value, part)
        return value

    def message(self, name: str) -> str:
        return f"Run.{name} will be removed: {self.instead}"


FORMER_NAMES: dict[str, Former] = {
    # The engine's own steps and locks.
    "add_note": Former("say", PRINT_IT),
    "say": Former("say", PRINT_IT),
    "apply_findings": Former("apply_findings", "use run.diagnoses, where kwnb's supervisor puts what it finds"),
    "control_lock": Former("control_lock", A_CONSISTENT_COPY),
    "state_lock": Former("state_lock", A_CONSISTENT_COPY),
    "end_sidecars": Former("end_sidecars", KWNB_DOES_IT),
    "finish_launcher": Former("finish_launcher", KWNB_DOES_IT),
    "mark_ended": Former("mark_ended", KWNB_DOES_IT),
    "fail": Former("fail", "use run.stop(reason) to end the run"),
    "relaunch": Former("relaunch", "use run.restart(task) for one task, or kwnb.launch for the whole run"),
    "stop_tasks": Former("stop_tasks", "use run.kill(task) or run.stop()"),
    "stop_all": Former("stop_all", "use run.stop()"),
    "stopping": Former("stopping", "use run.done and run.status"),
    "refresh": Former("refresh", "use run.snapshot(): kwnb's supervisor refreshes the run every 0.1 s"),
    # The engine's plumbing.
    "user_files": Former("user_files", "use run.script and run.settings.files"),
    "task_ids": Former("task_ids", "use [task.id for task in run.tasks]"),
    "coordinator": Former("coordinator", "use run.coordinator_tf_config()"),
    "cluster": Former("cluster", "use run.coordinator_tf_config()['cluster'], or a task's tf_config"),
    "gpu_placement": Former("gpu_placement", "each task's GPUs are in run.snapshot().tasks[i].gpu"),
    "folder": Former("folder", "use run.dir"),
    "log": Former("log", "kwnb's own account of the run is kwnb.log in run.dir"),
    "user_env": Former("user_env", "use run.settings.env"),
    "after_end": Former("after_end", "use run.wait(pictures=True)"),
}


def former(name: str) -> Former | None:
    """What `name` was on a Run, if anything; a launch option (run.timeout) is read from `run.settings`."""
    if name in FORMER_NAMES:
        return FORMER_NAMES[name]
    if name in OPTIONS:
        return Former(f"settings.{name}", f"use run.settings.{name}, where every launch option is")
    return None


OPTIONS = frozenset(field.name for field in dataclasses.fields(LaunchSettings))
