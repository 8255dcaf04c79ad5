"""A task's end that a restart recovered from: a task killed, out of memory, failed or lost by its peers, then
started again (the failure policy's --on-failure restart, or the user's %kw_restart).

Its diagnosis stays, as what happened: once the task is restarted it says so ("..., then restarted (restart 1
of 3)"), and once every training task has ended well it says the run recovered ("..., then recovered (restart
1 of 3)") and is marked `recovered`: history, not a fault, so the views show it apart from the faults and never
as an ok run's headline. Its words are the diagnosis's `cause` (what happened, without the advice and the
memory a fault's message adds: after a recovery "peak memory 657 MiB" read like an OOM kill).

`ends`: the kinds that say how one attempt of a task ended (killed, out_of_memory, error, peer_lost), as the
table of kinds marks them (engine/diagnoses/diagnose.py: ENDS).
"""
from __future__ import annotations

from ..tasks.view import TaskView
from .diagnosis import Diagnosis

def faults(diagnoses) -> list:
    """The diagnoses that say something is wrong: not what the run recovered from."""
    return [d for d in diagnoses if not d.recovered]


def attempts_of(found: list[Diagnosis], tasks: list[TaskView], ends: tuple) -> list[Diagnosis]:
    """Fresh findings of a task's end, marked with the attempt they are about (the task's restarts now)."""
    for diagnosis in found:
        if diagnosis.kind in ends and diagnosis.task is not None:
            diagnosis.attempt = tasks[diagnosis.task].restarts
    return found


def restarted_since(diagnosis: Diagnosis, task: TaskView, ends: tuple) -> bool:
    """The diagnosis says how an earlier attempt of `task` ended: the task has started again since."""
    return diagnosis.kind in ends and task.restarts > diagnosis.attempt


def after_restarts(current: list[Diagnosis], tasks: list[TaskView], ends: tuple,
                   restart_limit: int = 0) -> list[Diagnosis]:
    """The current diagnoses of an earlier attempt's end, in the words of what followed: restarted, or recovered
    once every training task exited 0. `restart_limit`: the restarts the failure policy may make (0: not said)."""
    ended_well = all(task.returncode == 0 for task in tasks if task.training)
    said = []
    for diagnosis in current:
        task = tasks[diagnosis.task] if diagnosis.task is not None else None
        if task is None or not diagnosis.cause or not restarted_since(diagnosis, task, ends):
            continue
        count = f"restart {task.restarts}" + (f" of {restart_limit}" if 0 < task.restarts <= restart_limit else "")
        then = "recovered" if ended_well else "restarted"
        said.append(Diagnosis(diagnosis.kind, diagnosis.task, f"{diagnosis.cause}, then {then} ({count})",
                              evidence=list(diagnosis.evidence), cause=diagnosis.cause, attempt=diagnosis.attempt,
                              recovered=ended_well))
    return said
