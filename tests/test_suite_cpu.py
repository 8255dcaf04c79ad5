"""benchmarks/suite_cpu.py, the plugin that says where the suite's time and CPU go: its table adds the workers'
files up, older files without the group column included, and where it may make a cpuacct group (root, cgroup v1)
a process the test run leaves behind unreaped is counted in that column, not in the reaped children's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.suite_cpu import CPUACCT, table

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_sums_the_workers_files_largest_cpu_first(tmp_path):
    (tmp_path / "cpu-gw0.json").write_text(json.dumps({"tests/a.py": [10, 1, 2, 9], "tests/b.py": [5, 0, 1, 1]}))
    (tmp_path / "cpu-gw1.json").write_text(json.dumps({"tests/b.py": [7, 1, 20]}))  # written before the group column
    lines = table(tmp_path).splitlines()
    assert lines[0] == "| file | wall s | own CPU s | children's CPU s | CPU s | group CPU s |"
    assert lines[2] == "| all 2 files | 22 | 2 | 23 | 25 | 10 |"
    assert lines[3:] == ["| tests/b.py | 12 | 1 | 21 | 22 | 1 |", "| tests/a.py | 10 | 1 | 2 | 3 | 9 |"]


SPIN = """import pathlib, sys, time
end = time.process_time() + 1.5
while time.process_time() < end:
    pass
pathlib.Path(sys.argv[1]).write_text("spun")
"""
# A child that starts a grandchild spinning for 1.5 CPU-s and exits at once: the grandchild is nobody's to reap. The
# test waits for its end (a fixed 3 s was too short once, under a load that gave it 0.6 CPU-s in them).
SPIN_ORPHAN = """
import pathlib, subprocess, sys, time
HERE = pathlib.Path(__file__).parent
def test_leaves_a_busy_grandchild():
    subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen(sys.argv[1:])",
                    sys.executable, str(HERE / "spin.py"), str(HERE / "spun")])
    end = time.time() + 120
    while not (HERE / "spun").exists() and time.time() < end:
        time.sleep(0.1)
    time.sleep(0.3)  # its exit
    assert (HERE / "spun").exists()
"""


@pytest.mark.skipif(not os.access(CPUACCT, os.W_OK), reason=f"no writable {CPUACCT} (cgroup v1, root): no group column")
def test_what_no_test_process_reaps_is_counted_in_the_group_column(tmp_path):
    (tmp_path / "test_orphan.py").write_text(SPIN_ORPHAN)
    (tmp_path / "spin.py").write_text(SPIN)
    stale = CPUACCT / f"kwnb-suite-gw9-{os.getpid()}"  # as an earlier run leaves one whose orphans outlived it
    stale.mkdir()
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_XDIST_WORKER"}  # not this worker's
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "benchmarks.suite_cpu", "-p", "no:cacheprovider",
                           str(tmp_path / "test_orphan.py")], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**env, "KWNB_SUITE_CPU_DIR": str(tmp_path / "cpu"), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert not stale.exists()
    [(name, (wall, own, children, group))] = json.loads((tmp_path / "cpu" / "cpu-main.json").read_text()).items()
    assert name.endswith("test_orphan.py") and wall >= 1.5
    assert group - own - children > 1.2, (own, children, group)  # the grandchild's 1.5 s, in the group column only
    [(test, (test_wall, test_group))] = json.loads((tmp_path / "cpu" / "tests-main.json").read_text()).items()
    assert test.endswith("::test_leaves_a_busy_grandchild") and test_wall >= 1.5
    assert test_group == pytest.approx(group, abs=0.01)
