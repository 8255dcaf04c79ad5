"""The session's real limits: memory and CPUs where they are enforced, not the machine's figures.

Inside a container or a JupyterHub pod, psutil reports the whole node (a 2 GiB Binder session on a
64 GiB node sees 64 GiB). The limits that apply are those of the memory and CPU cgroups kwnb runs in
(cgroup v1: memory.limit_in_bytes, cpu.cfs_quota_us / cpu.cfs_period_us; v2: memory.max, cpu.max;
the smallest along the path to the root, since a parent's limit binds its children), and the
MEM_LIMIT / CPU_LIMIT variables JupyterHub's spawners set (in bytes and in CPUs). The machine's
figures apply only where none of those does. The smallest limit wins, and says where it comes from.

Also the OOM killer's counters (v1 memory.oom_control, v2 memory.events, /proc/vmstat), read
without privileges, so that a task killed for memory can be told apart from any other SIGKILL.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from .sizes import format_size

CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit value; anything this large is none.
UNLIMITED = 1 << 60


@dataclass(frozen=True)
class Cgroup:
    """One controller's group of a process: its folder and the cgroup version of that hierarchy."""
    path: Path
    version: int  # 1 or 2

    def read(self, name: str) -> str | None:
        try:
            return (self.path / name).read_text()
        except OSError:
            return None

    def ancestors(self, mount: Path) -> list["Cgroup"]:
        """This group and its parents up to the hierarchy's mount point, innermost first."""
        groups, path = [], self.path
        while True:
            groups.append(Cgroup(path, self.version))
            if path == mount or mount not in path.parents:
                return groups
            path = path.parent


@dataclass(frozen=True)
class Limits:
    memory: int  # bytes the session may use
    memory_source: str  # "cgroup v1 memory.limit_in_bytes", "cgroup v2 memory.max", "MEM_LIMIT", "machine"
    memory_used: int  # bytes in use, counted where the limit is
    cpus: float  # CPUs the session may use
    cpus_source: str  # "cgroup v1 cpu.cfs_quota_us", "cgroup v2 cpu.max", "CPU_LIMIT", "CPU affinity", "machine"
    cgroup: Cgroup | None  # the memory cgroup kwnb is in, where there is one

    @property
    def memory_available(self) -> int:
        return max(0, self.memory - self.memory_used)

    def describe(self) -> str:
        return (f"{format_size(self.memory)} of memory ({self.memory_source}), {format_size(self.memory_used)} in use; "
                f"{self.cpus:g} CPU{'s' * (self.cpus != 1)} ({self.cpus_source})")


def _mounts(mountinfo: Path) -> dict[str, tuple[Path, str]]:
    """Each cgroup hierarchy's mount point and root: v1 by controller name, v2 as "" (as /proc/PID/cgroup names it)."""
    mounts: dict[str, tuple[Path, str]] = {}
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return mounts
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()  # filesystem type, source, super options
        fstype, options = after[0], after[2] if len(after) > 2 else ""
        root, point = fields[3], Path(fields[4])
        if fstype == "cgroup2":
            mounts.setdefault("", (point, root))
        elif fstype == "cgroup":
            for option in options.split(","):
                if option in ("memory", "cpu"):
                    mounts.setdefault(option, (point, root))
    return mounts


def cgroup_of(controller: str, pid: int | str = "self", *, proc: Path = Path("/proc")) -> tuple[Cgroup, Path] | None:
    """The group of `pid` for a controller ("memory" or "cpu") and its hierarchy's mount point.

    cgroup v1 names the controller in /proc/PID/cgroup; v2 has one line "0::/path", used where no v1
    hierarchy has the controller and the v2 group offers it (a hybrid machine keeps v2 nearly empty)."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    mounts = _mounts(proc / str(pid) / "mountinfo")
    paths = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    for key, version in ((controller, 1), ("", 2)):
        if key not in paths or key not in mounts:
            continue
        point, root = mounts[key]
        relative = os.path.relpath(paths[key], root) if paths[key].startswith(root) else paths[key].lstrip("/")
        folder = (point / relative).resolve() if relative != "." else point
        if not folder.is_dir():
            folder = point  # a container often mounts its own group as the hierarchy's root
        probe = "memory.max" if controller == "memory" else "cpu.max"
        if version == 2 and not (folder / probe).exists() and not (point / "cgroup.controllers").exists():
            continue
        if version == 2 and controller not in (_read(point / "cgroup.controllers") or "").split():
            continue
        return Cgroup(folder, version), point
    return None


def memory_cgroup_of(pid: int | str = "self") -> Cgroup | None:
    found = cgroup_of("memory", pid)
    return found[0] if found else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _number(text: str | None) -> int | None:
    try:
        return int(text.split()[0]) if text and text.split() else None
    except ValueError:
        return None  # "max": no limit


def _cgroup_memory(found: tuple[Cgroup, Path]) -> tuple[int | None, str, int | None]:
    """The smallest memory limit from the group to the root, its file name, and the group's usage
    less inactive page cache (the kernel reclaims that before it kills; docker stats counts the same)."""
    group, mount = found
    name = "memory.limit_in_bytes" if group.version == 1 else "memory.max"
    limits = [_number(level.read(name)) for level in group.ancestors(mount)]
    limit = min((value for value in limits if value is not None and value < UNLIMITED), default=None)
    used = _number(group.read("memory.usage_in_bytes" if group.version == 1 else "memory.current"))
    if used is not None:
        stats = dict(line.split(" ", 1) for line in (group.read("memory.stat") or "").splitlines() if " " in line)
        inactive = _number(stats.get("total_inactive_file" if group.version == 1 else "inactive_file"))
        used = max(0, used - (inactive or 0))
    return limit, f"cgroup v{group.version} {name}", used


def _cgroup_cpus(found: tuple[Cgroup, Path]) -> tuple[float | None, str]:
    group, mount = found
    quotas = []
    for level in group.ancestors(mount):
        if group.version == 1:
            quota, period = _number(level.read("cpu.cfs_quota_us")), _number(level.read("cpu.cfs_period_us"))
        else:
            text = (level.read("cpu.max") or "max").split()
            quota, period = _number(text[0]), _number(text[1] if len(text) > 1 else None)
        if quota and quota > 0 and period:
            quotas.append(quota / period)
    name = "cpu.cfs_quota_us" if group.version == 1 else "cpu.max"
    return (min(quotas) if quotas else None), f"cgroup v{group.version} {name}"


def _env_number(environ: dict, name: str) -> float | None:
    try:
        value = float(environ.get(name, "") or "nan")
    except ValueError:
        return None
    return value if value > 0 else None


def _user_memory() -> int:
    """What this user's processes hold: a JupyterHub limit without a cgroup is per user (one uid each)."""
    uid, total = os.getuid(), 0
    for process in psutil.process_iter(["uids", "memory_info"]):
        info = process.info
        if info.get("uids") and info["uids"].real == uid and info.get("memory_info"):
            total += info["memory_info"].rss
    return total


def read_limits(environ: dict | None = None, *, proc: Path = Path("/proc")) -> Limits:
    """The limits that apply to this process now. Costs a few file reads (under 1 ms), more with MEM_LIMIT alone."""
    environ = os.environ if environ is None else environ
    machine = psutil.virtual_memory()
    memory = [(machine.total, "machine", machine.total - machine.available)]
    memory_group = cgroup_of("memory", proc=proc)
    if memory_group:
        limit, source, used = _cgroup_memory(memory_group)
        if limit is not None:
            memory.append((limit, source, used if used is not None else machine.total - machine.available))
    hub_memory = _env_number(environ, "MEM_LIMIT")
    if hub_memory:
        memory.append((int(hub_memory), "MEM_LIMIT", None))
    chosen = min(memory[1:] + memory[:1], key=lambda entry: entry[0])  # on a tie, the enforced limit names it
    used = chosen[2] if chosen[2] is not None else _user_memory()
    cpus = [(float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1),
             "CPU affinity" if hasattr(os, "sched_getaffinity") else "machine")]
    cpu_group = cgroup_of("cpu", proc=proc)
    if cpu_group:
        quota, source = _cgroup_cpus(cpu_group)
        if quota is not None:
            cpus.append((quota, source))
    hub_cpus = _env_number(environ, "CPU_LIMIT")
    if hub_cpus:
        cpus.append((hub_cpus, "CPU_LIMIT"))
    cpu_count, cpu_source = min(cpus[1:] + cpus[:1], key=lambda entry: entry[0])
    return Limits(int(chosen[0]), chosen[1], int(used), cpu_count, cpu_source, memory_group[0] if memory_group else None)


def oom_kills(cgroup: Cgroup | None = None) -> int | None:
    """Tasks the OOM killer has ended in a memory cgroup so far (kwnb's own by default); None where unreadable.

    v1 counts in memory.oom_control (kernels since 4.13), v2 in memory.events, which also counts
    the group's descendants. Compare two readings: the counter only grows."""
    cgroup = cgroup if cgroup is not None else memory_cgroup_of()
    if cgroup is None:
        return None
    text = cgroup.read("memory.oom_control" if cgroup.version == 1 else "memory.events") or ""
    for line in text.splitlines():
        if line.startswith("oom_kill "):
            return _number(line.split(" ", 1)[1])
    return None


def machine_oom_kills() -> int | None:
    """The machine's OOM kills so far (/proc/vmstat, readable by anyone): the evidence where no cgroup is."""
    for line in (_read(Path("/proc/vmstat")) or "").splitlines():
        if line.startswith("oom_kill "):
            return _number(line.split(" ", 1)[1])
    return None
