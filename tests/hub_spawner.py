"""A JupyterHub spawner that puts each learner's server in cgroups of its own (tests/hub_config.py uses it).

LocalProcessSpawner sets MEM_LIMIT and CPU_LIMIT in the server's environment but enforces nothing. This
subclass makes a group per user with those limits, on cgroup v1 (memory, cpu, cpuacct hierarchies) or v2
(one unified group), and its `preexec_fn` writes the new process into them while it is still root, before
LocalProcessSpawner's own preexec_fn drops to the user: a `pre_spawn_hook` runs before there is a pid, and
after the drop the user may not write to the groups. Every process the server starts (kernels, kwnb's tasks,
the warm pool) inherits the groups, so the limits hold for the learner's whole session.
"""
from __future__ import annotations

import os
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner

CGROUP = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "cpu", "cpuacct")
CFS_PERIOD_US = 100_000  # the kernel's default period; the quota is cpu_limit periods' worth
GROUP_PREFIX = "kwnb-hub-"


def cgroup_version() -> int | None:
    """2 on a unified hierarchy with the memory and cpu controllers, 1 where the v1 ones are mounted, else None."""
    controllers = CGROUP / "cgroup.controllers"
    if controllers.exists() and {"memory", "cpu"} <= set(controllers.read_text().split()):
        return 2
    if all((CGROUP / name / "cgroup.procs").exists() for name in V1_CONTROLLERS):
        return 1
    return None


def group_paths(user: str) -> list[Path]:
    """The user's groups: one per v1 hierarchy, or the one v2 group."""
    name = GROUP_PREFIX + user
    if cgroup_version() == 2:
        return [CGROUP / name]
    return [CGROUP / controller / name for controller in V1_CONTROLLERS]


def make_groups(user: str, mem_bytes: int | None, cpus: float | None) -> list[Path]:
    """Make (or reuse) the user's groups with these limits; returns the cgroup.procs files to join."""
    groups = group_paths(user)
    for group in groups:
        group.mkdir(exist_ok=True)
    quota = int(cpus * CFS_PERIOD_US) if cpus else None
    if cgroup_version() == 2:
        (groups[0] / "memory.max").write_text(str(mem_bytes) if mem_bytes else "max")
        (groups[0] / "cpu.max").write_text(f"{quota if quota else 'max'} {CFS_PERIOD_US}")
    else:
        memory, cpu = groups[0], groups[1]
        (memory / "memory.limit_in_bytes").write_text(str(mem_bytes) if mem_bytes else "-1")
        (cpu / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (cpu / "cpu.cfs_quota_us").write_text(str(quota) if quota else "-1")
    return [group / "cgroup.procs" for group in groups]


class CgroupSpawner(LocalProcessSpawner):
    """LocalProcessSpawner whose servers start inside their user's groups, limited by mem_limit and cpu_limit."""

    def make_preexec_fn(self, name):
        procs = [str(path) for path in make_groups(name, self.mem_limit, self.cpu_limit)]
        drop_to_user = super().make_preexec_fn(name)

        def join_then_drop():
            for path in procs:  # still root here
                with open(path, "w") as handle:
                    handle.write(str(os.getpid()))
            drop_to_user()

        return join_then_drop
