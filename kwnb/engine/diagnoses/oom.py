"""Telling the kernel's OOM killer from any other SIGKILL, without privileges, for `out_of_memory`.

While a task lives, the supervisor's MemoryWatch notes once the memory cgroup it is in, that group's OOM-kill
counter (cgroup v1 memory.oom_control, v2 memory.events: machine/limits.py) and the machine's (/proc/vmstat), and
the memory limit that applies to it (the group's, else the session's, else the machine's). When the task dies of
SIGKILL, a counter that grew, or a kernel log line naming its pid (`oom-kill:...,pid=N,` and `Killed
process N`, where /dev/kmsg is readable), says the OOM killer did it. Cost: a few file reads per task
start, and one kernel log read per SIGKILLed task. What is noted is the watch's (one per run), by task
position, so that a diagnosis pass gets the evidence as a value (diagnose.ProcessFacts).
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from ...machine import limits
from ..tasks.view import TaskView

KMSG_BYTES = 1 << 20  # the kernel's ring buffer is 128 kB-1 MB; read no more than that


@dataclass
class Watched:
    pid: int
    cgroup: limits.Cgroup | None
    kills: int | None  # the cgroup's OOM kills when the task was first seen
    machine_kills: int | None
    limit: int
    limit_source: str
    started: float  # when the task started, in seconds since boot (the kernel log's clock): pids are reused


@dataclass(frozen=True)
class OomEvidence:
    limit: int
    limit_source: str
    lines: tuple[str, ...]


SIGKILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)  # how a task's exit code says SIGKILL (a shell: 137)


class MemoryWatch:
    """What was noted of each task of one run (by position), for telling the OOM killer's SIGKILL apart."""

    def __init__(self):
        self._watched: dict[int, Watched] = {}
        self._found: dict[int, tuple[int, OomEvidence | None]] = {}  # (pid, evidence): read once per death

    def note(self, task: TaskView) -> None:
        """Remember a live task's cgroup and counters, once per process (a restart is a new one); re-read while
        the task is still starting, as a launcher may move it into its group just after it starts."""
        if not task.alive or task.pid is None:
            return
        seen = self._watched.get(task.position)
        if seen is not None and seen.pid == task.pid and task.phase != "starting":
            return
        found = limits.cgroup_of("memory", task.pid)
        group = found[0] if found else None
        if seen is not None and seen.pid == task.pid and seen.cgroup == group:
            return
        limit, source = _limit(found)
        started = time.monotonic() - (time.time() - (task.started_at or time.time()))
        self._watched[task.position] = Watched(task.pid, group, limits.oom_kills(group) if group else None,
                                               limits.machine_oom_kills(), limit, source, started - 1.0)

    def evidence(self, task: TaskView) -> OomEvidence | None:
        """For a task that died of SIGKILL: what shows the OOM killer ended it, or None. Read once per death."""
        cached = self._found.get(task.position)
        if cached is not None and cached[0] == task.pid:
            return cached[1]
        seen = self._watched.get(task.position)
        if seen is None or seen.pid != task.pid:
            return None
        result = _evidence(seen)
        self._found[task.position] = (task.pid, result)
        return result

    def killed(self, tasks: list[TaskView]) -> dict[int, OomEvidence]:
        """The OOM killer's evidence for each task that died of SIGKILL, by position (ProcessFacts.oom)."""
        found = {task.position: self.evidence(task) for task in tasks if task.returncode in SIGKILLED}
        return {position: evidence for position, evidence in found.items() if evidence is not None}


def _evidence(seen: Watched) -> OomEvidence | None:
    logged = kernel_log(since=seen.started)
    lines = [line for line in logged or () if f"pid={seen.pid}," in line or f"process {seen.pid} " in line]
    kills = limits.oom_kills(seen.cgroup) if seen.cgroup else None
    if kills is not None and seen.kills is not None and kills > seen.kills:
        lines.insert(0, f"cgroup v{seen.cgroup.version} {seen.cgroup.path}: oom_kill {seen.kills} -> {kills}")
    machine = limits.machine_oom_kills()
    # The machine's counter counts every process's OOM kill: evidence only where the kernel log, which names the
    # killed pid, cannot be read (another process of the machine OOM-killed beside a task SIGKILLed otherwise).
    if not lines and machine is not None and seen.machine_kills is not None and machine > seen.machine_kills \
            and logged is None:
        lines.append(f"/proc/vmstat: oom_kill {seen.machine_kills} -> {machine}")
    return OomEvidence(seen.limit, seen.limit_source, tuple(lines)) if lines else None


def kernel_log(since: float = 0.0) -> list[str] | None:
    """The kernel's log lines logged `since` seconds after boot or later, where this user may read them (root,
    or kernel.dmesg_restrict=0); else None. A record is "level,sequence,microseconds since boot,flags;text"."""
    try:
        descriptor = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    lines, size = [], 0
    try:
        while size < KMSG_BYTES:
            try:
                record = os.read(descriptor, 8192)  # one record per read
            except BlockingIOError:
                break  # the end of the buffer
            except OSError:
                continue  # EPIPE: a record was overwritten while reading; go on with the next
            if not record:
                break
            size += len(record)
            head, _, text = record.decode("utf-8", "replace").partition(";")
            fields = head.split(",")
            if len(fields) > 2 and fields[2].isdigit() and int(fields[2]) / 1e6 >= since:
                lines.append(text.rstrip("\n"))
    finally:
        os.close(descriptor)
    return lines


def _limit(found) -> tuple[int, str]:
    """The smallest memory limit from the task's group up to the root, else the session's (limits.read_limits)."""
    session = limits.read_limits()
    if found:
        group, mount = found
        name = "memory.limit_in_bytes" if group.version == 1 else "memory.max"
        values = [_int(level.read(name)) for level in group.ancestors(mount)]
        values = [v for v in values if v is not None and v < limits.UNLIMITED]
        if values and min(values) < session.memory:
            return min(values), f"cgroup v{group.version} {name}"
    return session.memory, session.memory_source


def _int(text: str | None) -> int | None:
    try:
        return int(text.split()[0]) if text and text.split() else None
    except ValueError:
        return None  # v2's "max": no limit
