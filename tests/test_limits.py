"""The session's limits (kwnb/machine/limits.py): cgroup v1 and v2 layouts as they are on disk, the
JupyterHub variables, and a real cgroup v1 group made by the test where the machine allows it."""
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kwnb.machine import limits

GiB = 1 << 30


def fake_proc(tmp_path: Path, cgroup_lines: list[str], mounts: list[str]) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("\n".join(cgroup_lines) + "\n")
    (proc / "self" / "mountinfo").write_text("\n".join(mounts) + "\n")
    return proc


def write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text)


def v1_layout(tmp_path: Path, memory_limit: str, quota: str, parent_memory: str = "9223372036854771712"):
    root = tmp_path / "sys" / "fs" / "cgroup"
    write(root / "memory", memory__limit_in_bytes="9223372036854771712\n")
    write(root / "memory" / "kubepods", memory__limit_in_bytes=parent_memory + "\n")
    write(root / "memory" / "kubepods" / "pod1", memory__limit_in_bytes=memory_limit + "\n",
          memory__usage_in_bytes=str(900 * 10**6) + "\n",
          memory__stat="cache 1\ntotal_inactive_file 100000000\n",
          memory__oom_control="oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    write(root / "cpu", cpu__cfs_quota_us="-1\n", cpu__cfs_period_us="100000\n")
    write(root / "cpu" / "kubepods" / "pod1", cpu__cfs_quota_us=quota + "\n", cpu__cfs_period_us="100000\n")
    mounts = [f"31 23 0:28 / {root} rw - tmpfs tmpfs rw,mode=755",
              f"32 31 0:29 / {root}/cpu rw,relatime - cgroup cgroup rw,cpu",
              f"35 31 0:32 / {root}/memory rw,relatime - cgroup cgroup rw,memory",
              f"41 31 0:38 / {root}/unified rw,relatime - cgroup2 cgroup2 rw"]
    write(root / "unified", cgroup__controllers="hugetlb\n")
    lines = ["4:memory:/kubepods/pod1", "1:cpu:/kubepods/pod1", "0::/"]
    return fake_proc(tmp_path, lines, mounts)


def test_cgroup_v1_limits_are_read_from_the_processes_own_groups(tmp_path):
    proc = v1_layout(tmp_path, str(2 * GiB), "100000")
    found = limits.read_limits({}, proc=proc)
    assert (found.memory, found.memory_source) == (2 * GiB, "cgroup v1 memory.limit_in_bytes")
    assert found.memory_used == 800 * 10**6  # usage less the inactive page cache
    assert (found.cpus, found.cpus_source) == (1.0, "cgroup v1 cpu.cfs_quota_us")
    assert limits.oom_kills(found.cgroup) == 3
    assert "2.0 GiB of memory (cgroup v1 memory.limit_in_bytes)" in found.describe()


def test_a_parents_smaller_limit_binds_the_child(tmp_path):
    proc = v1_layout(tmp_path, "9223372036854771712", "-1", parent_memory=str(GiB))
    found = limits.read_limits({}, proc=proc)
    assert found.memory == GiB and found.memory_source == "cgroup v1 memory.limit_in_bytes"
    assert found.cpus_source in ("CPU affinity", "machine")  # no quota anywhere


def test_cgroup_v2_limits_and_events(tmp_path):
    root = tmp_path / "sys" / "fs" / "cgroup"
    write(root, cgroup__controllers="cpuset cpu io memory pids\n")
    write(root / "user.slice", memory__max=f"{3 * GiB}\n", cpu__max="max 100000\n")
    write(root / "user.slice" / "jupyter", memory__max="max\n", cpu__max="150000 100000\n",
          memory__current=f"{GiB}\n", memory__stat="anon 1\ninactive_file 0\n",
          memory__events="low 0\nhigh 0\nmax 4\noom 2\noom_kill 1\n")
    proc = fake_proc(tmp_path, ["0::/user.slice/jupyter"],
                     [f"30 23 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate"])
    found = limits.read_limits({}, proc=proc)
    assert (found.memory, found.memory_source, found.memory_used) == (3 * GiB, "cgroup v2 memory.max", GiB)
    assert (found.cpus, found.cpus_source) == (1.5, "cgroup v2 cpu.max")
    assert found.memory_available == 2 * GiB
    assert limits.oom_kills(found.cgroup) == 1


def test_a_container_that_mounts_its_own_group_as_the_root(tmp_path):
    # Docker with a private cgroup namespace: /proc/self/cgroup says "0::/" and the mount is the group itself.
    root = tmp_path / "sys" / "fs" / "cgroup"
    write(root, cgroup__controllers="cpu memory\n", memory__max=f"{GiB}\n", cpu__max="100000 100000\n")
    proc = fake_proc(tmp_path, ["0::/"], [f"30 23 0:26 / {root} rw - cgroup2 cgroup2 rw"])
    found = limits.read_limits({}, proc=proc)
    assert (found.memory, found.cpus) == (GiB, 1.0)


def test_jupyterhub_variables_apply_where_smaller(tmp_path):
    proc = v1_layout(tmp_path, str(4 * GiB), "200000")
    found = limits.read_limits({"MEM_LIMIT": str(GiB), "CPU_LIMIT": "0.5"}, proc=proc)
    assert (found.memory, found.memory_source) == (GiB, "MEM_LIMIT")
    assert (found.cpus, found.cpus_source) == (0.5, "CPU_LIMIT")
    assert found.memory_used > 0  # this user's processes
    ignored = limits.read_limits({"MEM_LIMIT": "", "CPU_LIMIT": "none"}, proc=proc)
    assert (ignored.memory_source, ignored.cpus_source) == ("cgroup v1 memory.limit_in_bytes", "cgroup v1 cpu.cfs_quota_us")


def test_no_cgroup_at_all_falls_back_to_the_machine(tmp_path):
    found = limits.read_limits({}, proc=tmp_path / "nowhere")
    assert found.memory_source == "machine" and found.cgroup is None
    assert limits.oom_kills(found.cgroup) is None or found.cgroup is None


def _real_v1_group(controller: str) -> Path:
    base = Path("/sys/fs/cgroup") / controller
    if os.geteuid() != 0 or not (base / "cgroup.procs").exists() or not os.access(base, os.W_OK):
        pytest.skip(f"needs root and a writable cgroup v1 {controller} hierarchy at {base}")
    group = base / f"kwnb-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as error:
        pytest.skip(f"cannot create a cgroup at {group}: {error}")
    return group


def test_a_real_cgroup_v1_group_with_2_gib_and_one_cpu():
    memory, cpu = _real_v1_group("memory"), _real_v1_group("cpu")
    try:
        (memory / "memory.limit_in_bytes").write_text(str(2 * GiB))
        (cpu / "cpu.cfs_period_us").write_text("100000")
        (cpu / "cpu.cfs_quota_us").write_text("100000")
        code = ("import json, sys; from kwnb.machine import limits; found = limits.read_limits({}); "
                "print(json.dumps([found.memory, found.memory_source, found.cpus, found.cpus_source, "
                "found.memory_used, limits.oom_kills(found.cgroup)]))")
        script = f'echo $$ > {memory}/cgroup.procs && echo $$ > {cpu}/cgroup.procs && exec "$0" -c "$1"'
        out = subprocess.run(["sh", "-c", script, sys.executable, code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        mem, mem_source, cpus, cpu_source, used, kills = json.loads(out.stdout)
        assert (mem, mem_source) == (2 * GiB, "cgroup v1 memory.limit_in_bytes")
        assert (cpus, cpu_source) == (1.0, "cgroup v1 cpu.cfs_quota_us")
        assert 0 < used < 2 * GiB and kills == 0
    finally:
        for group in (memory, cpu):
            group.rmdir()
