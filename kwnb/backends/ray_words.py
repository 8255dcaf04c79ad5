"""What the Ray backend (ray.py) says when Ray refuses or fails, one sentence each with the fix.
Values in, words out: nothing here talks to Ray."""
from __future__ import annotations

import re

from ..task.tf_config import TaskId

# The line the backend writes into a task's log when Ray ends the actor under it; the diagnoses
# (engine/diagnoses/ray_faults.py) read it back from the log, like every other line.
DIED_MARK = "kwnb: Ray ended"
NODE_LOST = "its node was lost"
MEMORY_MONITOR = "Ray's memory monitor killed it"


def no_cluster(address: str, error: BaseException) -> str:
    said = f"{error} {error.__cause__ or ''}"
    if "InvalidAuthToken" in said or "Authentication token" in said:
        return (f"the Ray cluster at {address} wants a token this Python does not have: set RAY_AUTH_MODE=token "
                f"and RAY_AUTH_TOKEN (or ~/.ray/auth_token) as the cluster has them, before Ray is first used here")
    where = "this machine (address auto)" if address == "auto" else address
    return (f"no Ray cluster at {where}: {_first_line(error)}; start one with `ray start --head` there, or give "
            f"--address HOST:PORT of a running head (its `ray status` shows it)")


def init_failed(address: str, error: BaseException) -> str:
    text = str(error)
    if "version mismatch" in text.lower():
        versions = re.findall(r"Ray: ([\w.]+)", text)
        said = f" (cluster {versions[0]}, here {versions[1]})" if len(versions) >= 2 else ""
        return (f"Ray version mismatch between this Python and the cluster at {address}{said}: install the "
                f"cluster's version here, e.g. pip install 'ray=={versions[0] if versions else 'X.Y.Z'}'")
    return f"could not join the Ray cluster at {address}: {_first_line(error)}"


def resources(resources: dict) -> str:
    shown = {key: value for key, value in resources.items() if key in ("CPU", "GPU")}
    return ", ".join(f"{value:g} {key}" for key, value in sorted(shown.items())) or "nothing"


def infeasible(bundle: dict, count: int, strategy: str, nodes: list[dict]) -> str:
    """Why the cluster can never hold `count` bundles (an empty string if it can, once they are free)."""
    live = sorted((node for node in nodes if node.get("Alive")), key=lambda node: node.get("NodeManagerAddress", ""))
    alive = [node.get("Resources", {}) for node in live]
    fits = [all(node.get(key, 0) >= need for key, need in bundle.items()) for node in alive]
    sizes = "; nodes: " + ", ".join(f"{node.get('NodeManagerAddress', '?')} {resources(node.get('Resources', {}))}"
                                     for node in live) if live else "; no node is alive"
    ask = f"{count} tasks of {resources(bundle)} each"
    if not any(fits):
        return (f"no node of the Ray cluster can hold one task of {resources(bundle)}{sizes}: "
                f"lower --cpus-per-task or --gpus-per-task")
    if strategy == "STRICT_SPREAD" and sum(fits) < count:
        return (f"--spread puts each task on a node of its own, and only {sum(fits)} of the cluster's nodes can hold "
                f"one of {ask}{sizes}: fewer tasks, or leave out --spread")
    capacity = sum(min(int(node.get(key, 0) // need) for key, need in bundle.items() if need) if fit else 0
                   for node, fit in zip(alive, fits)) if any(bundle.values()) else count
    if capacity < count:
        return f"the Ray cluster cannot hold {ask}, only {capacity}{sizes}: fewer tasks, or less per task"
    return ""


def busy(bundle: dict, count: int, strategy: str, seconds: float, free: dict) -> str:
    return (f"Ray could not place {count} tasks of {resources(bundle)} each ({strategy}) within {seconds:g} s: "
            f"free now: {resources(free)}; other jobs hold the rest (`ray status`), or ask for less per task")


def actor_failed(error: BaseException) -> str:
    return f"Ray could not start the actor that hosts a task: {_first_line(error)}"


def node_gone(task: TaskId, node: str) -> str:
    return (f"cannot restart {task} alone: Ray lost its node {node}, the address its peers' TF_CONFIG names; "
            f"launch the run again, which places every task afresh")


def placed(tasks: list[TaskId], nodes: list[str], spread: bool) -> str:
    where: dict[str, list[str]] = {}
    for task, node in zip(tasks, nodes):
        where.setdefault(node, []).append(str(task))
    said = "; ".join(f"{node}: {', '.join(names)}" for node, names in where.items())
    return f"Ray placed the tasks on {len(where)} node{'s' * (len(where) != 1)} ({'spread' if spread else 'packed'}): {said}"


def actor_died(task: TaskId, node: str, error: BaseException) -> str:
    """The line written into the task's log when its actor dies under it."""
    text = str(error)
    if "memory" in text.lower() and ("monitor" in text.lower() or "low on memory" in text.lower()):
        why = MEMORY_MONITOR
    elif re.search(r"node (?:has )?(?:died|is dead|was terminated)|node.*(?:died|dead|failed)", text, re.I | re.S):
        why = NODE_LOST
    else:
        why = "its actor died: " + _first_line(error)
    return f"{DIED_MARK} {task} on node {node}: {why}"


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
