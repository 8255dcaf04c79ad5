"""Planning a cluster: which tasks it has and which free local ports they get.

TF_CONFIG itself is defined once, in kwnb/task/tf_config.py, for the engine and for a Slurm task
alike; this module adds what only the engine does (counting tasks, picking ports).
"""
from __future__ import annotations

from ...errors import OptionError
from ...machine.ports import free_ports
from ..tasks.roles import chief_position
from ...task.tf_config import TASK_TYPES, TaskId, address_of, cluster_spec, tf_config, tf_config_json

__all__ = ["TASK_TYPES", "MAX_TASKS", "TaskId", "address_of", "cluster_spec", "tf_config", "tf_config_json",
           "plan_tasks", "coordinator_of", "free_ports", "localhost_cluster", "tf_configs"]

MAX_TASKS = 64  # a laptop cannot run more; a typo like -n 200 should not fork 200 TF runtimes


def plan_tasks(workers: int, ps: int = 0, chief: bool = False, evaluator: bool = False) -> list[TaskId]:
    """The tasks of a cluster in kwnb's order: the chief task if asked for (else worker 0 is the chief
    under MultiWorkerMirroredStrategy), workers, ps tasks, then the sidecar evaluator."""
    for label, count, low in (("workers", workers, 1 if not chief else 0), ("ps", ps, 0)):
        if not isinstance(count, int) or isinstance(count, bool):
            raise OptionError(f"number of {label} must be an integer, not {count!r}")
        if count < low:
            raise OptionError(f"number of {label} must be at least {low}, not {count}")
    total = workers + ps + int(chief) + int(evaluator)
    if total > MAX_TASKS:
        raise OptionError(f"{total} tasks is more than kwnb starts on one machine (at most {MAX_TASKS})")
    tasks = [TaskId("chief", 0)] if chief else []
    tasks += [TaskId("worker", i) for i in range(workers)]
    tasks += [TaskId("ps", i) for i in range(ps)]
    tasks += [TaskId("evaluator", 0)] if evaluator else []
    return tasks


def coordinator_of(tasks: list[TaskId]) -> TaskId | None:
    """The chief entry a coordinator outside the run needs: with ps tasks and no chief task, the
    coordinator of ParameterServerStrategy is the calling process (the notebook), and TensorFlow wants
    it in the cluster as `chief` (without it: "task_type 'chief' not found in cluster_spec")."""
    return TaskId("chief", 0) if chief_position(tasks) is None else None  # no task is the chief (tasks/roles.py)


def localhost_cluster(tasks: list[TaskId], ports: list[int] | None = None) -> dict[str, list[str]]:
    ports = ports if ports is not None else free_ports(len(tasks))
    return cluster_spec(tasks, [f"localhost:{port}" for port in ports])


def tf_configs(workers: int, ps: int = 0, index: int | None = None, chief: bool = False,
               evaluator: bool = False) -> list[dict]:
    """TF_CONFIG of every task (or of the task at position `index`) of a fresh localhost cluster,
    with the coordinator's chief entry where the cluster needs one (see `coordinator_of`)."""
    tasks = plan_tasks(workers, ps=ps, chief=chief, evaluator=evaluator)
    if index is not None and not 0 <= index < len(tasks):
        raise OptionError(f"--index must be between 0 and {len(tasks) - 1}, not {index}")
    members = tasks + [task for task in [coordinator_of(tasks)] if task]
    cluster = localhost_cluster(members)
    return [tf_config(cluster, task) for task in (tasks if index is None else [tasks[index]])]
