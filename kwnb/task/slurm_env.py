"""Inside a Slurm task: which kwnb task am I, where do all tasks listen, what is my TF_CONFIG (under Keras on
JAX, KERAS_BACKEND=jax: the KERAS_DISTRIBUTION_* variables instead, task/jax_task.py).

Runs in the task's own Python before the user's script (from the bootstrap), so it uses only the
standard library. The layout comes from Slurm's own variables, not from TensorFlow's
SlurmClusterResolver, which divides by zero GPUs on CPU-only nodes (and calls nvidia-smi
otherwise). Tasks are placed with `srun --distribution=block`: the first node's tasks are
0..k-1, the next node's follow, and so on; each task listens on base port + its rank on its node.
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time

from . import jax_task
from .runfolder import POSITION_ENV, RUN_DIR_ENV, SLURM_HEARTBEAT_ENV, SLURM_HEARTBEAT_STALE_ENV, SLURM_PORT_BASE_ENV, SLURM_TASKS_ENV, RunFolder
from .tf_config import TaskId, cluster_spec
from .tf_config import tf_config as _tf_config

HEARTBEAT_STALE_SECONDS = 120.0  # generous: shared filesystems cache file times for up to a minute


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list, e.g. 'gpu[01-03,07],login1' -> ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'login1']."""
    hosts: list[str] = []
    for item in _split_top_level(text):
        hosts.extend(_expand_item(item))
    return hosts


def _split_top_level(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in text.strip():
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth != 0:
        raise ValueError(f"unbalanced brackets in Slurm host list {text!r}")
    return [item for item in items + [current] if item]


def _expand_item(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if not match:
        return [item]
    head, tail = item[: match.start()], item[match.end():]
    return [head + number + rest for number in expand_ranges(match.group(1)) for rest in _expand_item(tail)]


def expand_ranges(text: str) -> list[str]:
    """'01-03,7' -> ['01', '02', '03', '7']: Slurm's numeric ranges (host names, task ranks), padding kept."""
    numbers = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        numbers.extend(str(number).zfill(len(low)) for number in range(int(low), int(high or low) + 1))
    return numbers


def expand_tasks_per_node(text: str) -> list[int]:
    """'2(x3),1' -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise ValueError(f"cannot read Slurm tasks per node {text!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def addresses(nodelist: str, tasks_per_node: str, port_base: int) -> list[str]:
    """host:port of every task of the step, by SLURM_PROCID (block distribution)."""
    hosts, counts = expand_hostlist(nodelist), expand_tasks_per_node(tasks_per_node)
    if len(hosts) != len(counts):
        raise ValueError(f"{len(hosts)} nodes in {nodelist!r} but {len(counts)} task counts in {tasks_per_node!r}")
    return [f"{host}:{port_base + local}" for host, count in zip(hosts, counts) for local in range(count)]


def tf_config(tasks: list[dict], procid: int, task_addresses: list[str]) -> dict:
    """Task `procid`'s TF_CONFIG, by the same definition the engine uses for local clusters."""
    if len(task_addresses) != len(tasks):
        raise ValueError(f"Slurm started {len(task_addresses)} tasks but kwnb planned {len(tasks)}")
    ids = [TaskId(task["type"], task["index"]) for task in tasks]
    return _tf_config(cluster_spec(ids, task_addresses), ids[procid])


def enter(environ=os.environ) -> None:
    """Become kwnb task SLURM_PROCID: log to its file, set TF_CONFIG and KWNB_WORKER, record them."""
    tasks = json.loads(environ[SLURM_TASKS_ENV])
    procid = int(environ["SLURM_PROCID"])
    me = tasks[procid]
    # stdout and stderr go straight to the task's log on the shared filesystem, where kwnb follows it.
    log = os.open(me["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    task_addresses = addresses(environ["SLURM_STEP_NODELIST"], environ["SLURM_STEP_TASKS_PER_NODE"],
                               int(environ[SLURM_PORT_BASE_ENV]))
    config = tf_config(tasks, procid, task_addresses)
    node = environ.get("SLURMD_NODENAME")
    mine = task_addresses[procid].rpartition(":")[0]
    if node and node != mine:
        raise RuntimeError(f"kwnb expected task {procid} on {mine} (block distribution) but Slurm put it on {node}")
    if jax_task.keras_on_jax(environ):  # a --framework jax run's: no TF_CONFIG
        environ.update(jax_task.cluster_variables(config["cluster"]["worker"], procid))
    else:
        environ["TF_CONFIG"] = json.dumps(config)
    environ[POSITION_ENV] = str(procid)
    folder = RunFolder(environ[RUN_DIR_ENV])
    record = {"tf_config": config, "host": node or mine, "pid": os.getpid(),
              "job": environ.get("SLURM_JOB_ID"), "step": environ.get("SLURM_STEP_ID")}
    _write_atomically(folder.slurm_task(procid), json.dumps(record))
    if environ.get(SLURM_HEARTBEAT_ENV):
        stale = float(environ.get(SLURM_HEARTBEAT_STALE_ENV, HEARTBEAT_STALE_SECONDS))
        threading.Thread(target=_watch_heartbeat, args=(environ[SLURM_HEARTBEAT_ENV], stale), daemon=True,
                         name="kwnb-heartbeat").start()


def _watch_heartbeat(path: str, stale: float = HEARTBEAT_STALE_SECONDS) -> None:
    """End this task when kwnb stops following the job (its kernel died), as the local watchdog does.

    Without it a job whose notebook is gone would hold its nodes until the time limit.
    """
    while True:
        time.sleep(min(5.0, stale / 4))
        try:
            age = time.time() - os.stat(path).st_mtime
        except OSError:
            age = float("inf")  # the run folder was removed
        if age > stale:
            print(f"kwnb: the process that started this job stopped following it {age:.0f} s ago; "
                  f"ending this task", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


def exit_file(environ=os.environ) -> str:
    return str(RunFolder(environ[RUN_DIR_ENV]).slurm_exit(environ["SLURM_PROCID"]))


def record_exit(code: int, environ=os.environ) -> None:
    """The task's exit code, for kwnb to read: Slurm without accounting keeps none per task."""
    _write_atomically(exit_file(environ), str(code))


def _write_atomically(path: str | os.PathLike, text: str) -> None:
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)
