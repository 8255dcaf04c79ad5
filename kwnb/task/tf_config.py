"""TF_CONFIG: the cluster spec and what each task is told. One definition for the engine (local
clusters, `%kw_tf_config`) and for a Slurm task that builds its own on its node.

Standard library only, since a Slurm task runs this before the user's script.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

# Task types TensorFlow's TFConfigClusterResolver understands, in the order kwnb lists them.
TASK_TYPES = ("chief", "worker", "ps", "evaluator")
# The sidecar evaluator is not part of the cluster: TensorFlow documents its TF_CONFIG as the training
# cluster (chief, workers, ps) with task type "evaluator", and the training tasks never dial it.
OUTSIDE_CLUSTER = ("evaluator",)
_TASK_NAME = re.compile(r"\s*(chief|worker|ps|evaluator)\s*(?:[: ]\s*(\d+))?\s*")


@dataclass(frozen=True)
class TaskId:
    """One process of the cluster: its role and its index within that role."""

    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type} {self.index}"

    @classmethod
    def parse(cls, text: str) -> "TaskId":
        """'ps:0', 'worker 1' or 'chief' (index 0), as a user names a task."""
        match = _TASK_NAME.fullmatch(text)
        if not match:
            raise ValueError(f"a task is named TYPE:INDEX with a type among {', '.join(TASK_TYPES)}, not {text!r}")
        return cls(match[1], int(match[2] or 0))


def cluster_spec(tasks: list[TaskId], addresses: list[str]) -> dict[str, list[str]]:
    """The `cluster` part of TF_CONFIG, with task types in TensorFlow's usual order; an evaluator's
    address is left out (it is not part of the cluster)."""
    if len(tasks) != len(addresses):
        raise ValueError(f"one address per task is needed: {len(tasks)} tasks, {len(addresses)} addresses")
    cluster: dict[str, list[str]] = {}
    for task, address in sorted(zip(tasks, addresses), key=lambda p: (TASK_TYPES.index(p[0].type), p[0].index)):
        if task.type not in OUTSIDE_CLUSTER:
            cluster.setdefault(task.type, []).append(address)
    return cluster


def tf_config(cluster: dict[str, list[str]], task: TaskId) -> dict:
    if task.type not in OUTSIDE_CLUSTER and task.index >= len(cluster.get(task.type, [])):
        raise ValueError(f"the cluster has no {task}")
    return {"cluster": cluster, "task": {"type": task.type, "index": task.index}}


def tf_config_json(cluster: dict[str, list[str]], task: TaskId) -> str:
    return json.dumps(tf_config(cluster, task))


def address_of(cluster: dict[str, list[str]], task: TaskId) -> str:
    """host:port where the task listens; "" for an evaluator, which serves nothing."""
    return "" if task.type in OUTSIDE_CLUSTER else cluster[task.type][task.index]
