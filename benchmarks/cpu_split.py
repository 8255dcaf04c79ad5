"""Where the CPU of one call goes, for benchmarks/ray_train.py: this process's threads (`thread_cpu`,
`by_thread`), and the processes of a Ray cluster, sampled by a process of its own (`CpuSampler`) so that the
sampling is not counted as this process's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from .common import ROOT

SAMPLE_SECONDS = 0.25  # how often the sampler reads the cluster's processes' CPU


def cpu_seconds() -> float:
    """This process's user + system CPU: every thread of it."""
    times = os.times()
    return times.user + times.system


def thread_cpu() -> dict[int, tuple[str, float]]:
    """Each live thread of this process: its name (Python's, else the kernel's, which Ray's C++ threads set)
    and its CPU seconds, from /proc."""
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    found = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # from field 3 (state) on: utime is 14, stime 15
        found[tid] = (names.get(tid) or stat[stat.index("(") + 1:stat.rindex(")")],
                      (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return found


def by_thread(before: dict, after: dict, spent: float, named: dict[int, str]) -> dict[str, float]:
    """The driver's CPU over a call by thread name; what threads that ended in between spent is the remainder,
    under the names of those seen while the call ran (`named`)."""
    split: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        name = named.get(tid, name)
        split[name] = split.get(name, 0.0) + cpu - (before[tid][1] if tid in before else 0.0)
    ended = sorted({name for tid, name in named.items() if tid not in after and tid not in before})
    label = f"ended threads ({', '.join(ended)} and any started later)" if ended else "ended threads"
    split[label] = spent - sum(split.values())
    return {name: round(cpu, 3) for name, cpu in split.items() if abs(cpu) >= 0.005}


class CpuSampler:
    """The CPU of the cluster's processes over one call, sampled by a process of its own (so that none of it
    is the driver's) every SAMPLE_SECONDS: each process's CPU from its first sample (or its birth) to its
    last. Not from children's times at both ends: Ray's raylet leaves its workers to be reaped without
    adding their CPU to its own children's. A process that ends loses at most its last interval."""

    def __init__(self, cluster):
        roots = [cluster.head.pid, *(node.pid for node in cluster.nodes)]
        code = f"from benchmarks.cpu_split import sample; sample({roots})"
        self.process = subprocess.Popen([sys.executable, "-c", code],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.process.stdout.readline()  # its first sample is taken

    def stop(self) -> dict[str, float]:
        said, _ = self.process.communicate("stop\n", timeout=30)
        return json.loads(said)


def sample(roots: list[int]) -> None:
    """CpuSampler's process: samples until a line on stdin, then prints {"head": CPU s, "cluster": CPU s}."""
    import psutil

    first, last, tree, initial = {}, {}, {}, True
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    while True:
        for root in roots:
            for process in _tree(psutil, root):
                try:
                    key, t = (process.pid, process.create_time()), process.cpu_times()
                except psutil.Error:
                    continue
                first.setdefault(key, t.user + t.system if initial else 0.0)
                last[key], tree[key] = t.user + t.system, root
        if initial:
            print("ready", flush=True)
            initial = False
        if stop.is_set():
            break
        stop.wait(SAMPLE_SECONDS)
    spent = {key: last[key] - first[key] for key in last}
    print(json.dumps({"head": sum(v for key, v in spent.items() if tree[key] == roots[0]),
                      "cluster": sum(spent.values())}))


def _tree(psutil, root: int) -> list:
    try:
        return [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.Error:
        return []
