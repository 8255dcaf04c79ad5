"""Cluster specs and TF_CONFIG: which tasks exist, where they listen, what each one is told.

Kept free of any process handling so that `%kw_tf_config`, the launchers and the tests
all agree on one definition of the cluster.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import portpicker

# Task types TensorFlow's TFConfigClusterResolver understands, in the order kwnb lists them.
TASK_TYPES = ("chief", "worker", "ps", "evaluator")
MAX_TASKS = 64  # a laptop cannot run more; a typo like -n 200 should not fork 200 TF runtimes


@dataclass(frozen=True)
class Task:
    """One process of the cluster: its role and index within that role."""

    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type} {self.index}"


def plan_tasks(workers: int, ps: int = 0, chief: bool = False) -> list[Task]:
    """The tasks of a cluster, worker 0 (the chief under MultiWorkerMirroredStrategy) first."""
    for label, count, low in (("workers", workers, 1 if not chief else 0), ("ps", ps, 0)):
        if not isinstance(count, int) or isinstance(count, bool):
            raise ValueError(f"number of {label} must be an integer, not {count!r}")
        if count < low:
            raise ValueError(f"number of {label} must be at least {low}, not {count}")
    total = workers + ps + int(chief)
    if total > MAX_TASKS:
        raise ValueError(f"{total} tasks is more than kwnb starts on one machine (at most {MAX_TASKS})")
    tasks = [Task("chief", 0)] if chief else []
    tasks += [Task("worker", i) for i in range(workers)]
    tasks += [Task("ps", i) for i in range(ps)]
    return tasks


def free_ports(count: int) -> list[int]:
    """Ports that are free now; distinct, since portpicker never hands out the same port twice."""
    return [portpicker.pick_unused_port() for _ in range(count)]


def cluster_spec(tasks: list[Task], addresses: list[str]) -> dict[str, list[str]]:
    """The `cluster` part of TF_CONFIG, with task types in TensorFlow's usual order."""
    if len(tasks) != len(addresses):
        raise ValueError("one address per task is needed")
    cluster: dict[str, list[str]] = {}
    for task, address in sorted(zip(tasks, addresses), key=lambda p: (TASK_TYPES.index(p[0].type), p[0].index)):
        cluster.setdefault(task.type, []).append(address)
    return cluster


def localhost_cluster(tasks: list[Task], ports: list[int] | None = None) -> dict[str, list[str]]:
    ports = ports if ports is not None else free_ports(len(tasks))
    return cluster_spec(tasks, [f"localhost:{port}" for port in ports])


def tf_config(cluster: dict[str, list[str]], task: Task) -> dict:
    if task.index >= len(cluster.get(task.type, [])):
        raise ValueError(f"the cluster has no {task}")
    return {"cluster": cluster, "task": {"type": task.type, "index": task.index}}


def tf_config_json(cluster: dict[str, list[str]], task: Task) -> str:
    return json.dumps(tf_config(cluster, task))


def address_of(cluster: dict[str, list[str]], task: Task) -> str:
    return cluster[task.type][task.index]
