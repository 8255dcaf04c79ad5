"""The kinds about Ray ending a task's actor under it (--backend ray): `ray_node_lost` (a node died or was
removed, told once per node with the tasks it held) and `ray_memory_monitor` (Ray's memory monitor killed the
actor). The Ray backend writes one line into the task's log when the actor dies (backends/ray_words.py); these
read it back from the task's tail, as values. A refusal at launch (no cluster at the address, resources the
cluster cannot give, a version mismatch) is the launch's own one-line error, the run's reason. Each says how its
task ended (`ended`), so `killed`, asked after them, does not tell the same SIGKILL again as a kill from outside."""
from __future__ import annotations

import re

from ...backends.ray_words import DIED_MARK, MEMORY_MONITOR, NODE_LOST
from ..tasks.view import TaskView
from .diagnosis import Diagnosis, Look

_DIED = re.compile(re.escape(DIED_MARK) + r" (?P<task>\S+ \d+) on node (?P<node>\S+): (?P<why>.*)")


def _death(task: TaskView) -> re.Match | None:
    """The backend's line saying how Ray ended this attempt of the task, if it did."""
    if task.returncode is None or task.stop_requested:
        return None
    for line in reversed(task.tail[-5:]):
        found = _DIED.search(str(line))
        if found:
            return found
    return None


def ray_node_lost(look: Look) -> list[Diagnosis]:
    lost: dict[str, list[tuple[TaskView, str]]] = {}
    for task in look.tasks:
        death = _death(task)
        if death and death["why"] == NODE_LOST:
            lost.setdefault(death["node"], []).append((task, death[0]))
    found = []
    for node, held in lost.items():
        names = ", ".join(str(task.id) for task, _ in held)
        cause = f"Ray lost node {node}, which held {names}"
        found += [Diagnosis("ray_node_lost", task.position,
                            f"{cause}: the node died or left the cluster and its tasks went with it; "
                            f"--on-failure restart starts them again where the placement group finds room "
                            f"(`ray status` shows the nodes left)", evidence=[line], cause=cause,
                            ended={task.position: f"went with Ray's lost node {node}"})
                  for task, line in held]
    return found


def ray_memory_monitor(task: TaskView, look: Look) -> Diagnosis | None:
    death = _death(task)
    if not death or death["why"] != MEMORY_MONITOR:
        return None
    cause = f"Ray's memory monitor killed {task.id} on node {death['node']}"
    return Diagnosis("ray_memory_monitor", task.position,
                     f"{cause}: the node's memory passed Ray's threshold (RAY_memory_usage_threshold, 0.95 by "
                     f"default) and Ray killed the newest work there; use less memory per task, or raise "
                     f"--cpus-per-task so that fewer tasks share a node", evidence=[death[0]], cause=cause,
                     ended={task.position: "was killed by Ray's memory monitor"})
