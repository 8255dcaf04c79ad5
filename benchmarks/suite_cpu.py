"""Where the test suite's CPU goes, per file: a pytest plugin (`pytest -p benchmarks.suite_cpu ...`).

The suite's time on 2 cores is bounded below by its CPU seconds over 2 (issue 37): no number of workers finishes
before the CPUs have done the work. This plugin adds up, per test file, the wall time and the CPU seconds of
the test process and of the children it reaped (a task, a kernel, a hub: RUSAGE_CHILDREN counts a process
once it and its waited-for descendants are reaped). What no test process reaps is not in those columns: Ray's
and Slurm's daemons and what they start, and a kernel's kept forker and its tasks. Where this process may make a
cgroup v1 cpuacct group (root), each pytest process moves into a group of its own, so that everything it starts
from then on, reaped or not, is counted in the "group" column: the group's CPU during the file's tests (a process
still running when a file ends counts towards the next), and each test's in tests-<worker>.json. Each pytest
process (each xdist worker) writes KWNB_SUITE_CPU_DIR/cpu-<worker>.json at its end; `python -m benchmarks.suite_cpu
DIR` sums them into a table, largest CPU first.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

DIR_ENV = "KWNB_SUITE_CPU_DIR"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")  # cgroup v1's; elsewhere the group column stays empty
_spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])  # file: [wall, own, children, group]
_group: list[Path] = []  # this process's cpuacct group, once made
_tests: dict[str, list[float]] = {}  # test id: [wall, group CPU], in tests-<worker>.json (with a group only)


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _group_cpu() -> float:
    try:
        return int((_group[0] / "cpuacct.usage").read_text()) / 1e9 if _group else 0.0
    except OSError:
        return 0.0


def pytest_configure(config):
    if not os.environ.get(DIR_ENV) or _group or not os.access(CPUACCT, os.W_OK):
        return
    for stale in CPUACCT.glob("kwnb-suite-*"):  # an earlier run's, left while something of it still ran
        try:
            stale.rmdir()  # only an empty group goes: a running worker's holds at least the worker
        except OSError:
            pass
    group = CPUACCT / f"kwnb-suite-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}"
    try:
        group.mkdir()
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return
    _group.append(group)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of one test, fixtures included (a session fixture counts where it starts)."""
    began, own, children, group = (time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN),
                                   _group_cpu())
    yield
    wall, group = time.monotonic() - began, _group_cpu() - group
    spent = _spent[item.nodeid.split("::")[0]]
    spent[0] += wall
    spent[1] += _cpu(resource.RUSAGE_SELF) - own
    spent[2] += _cpu(resource.RUSAGE_CHILDREN) - children
    spent[3] += group
    if _group:
        _tests[item.nodeid] = [round(wall, 2), round(group, 2)]


def pytest_sessionfinish(session):
    folder = os.environ.get(DIR_ENV)
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"cpu-{worker}.json").write_text(json.dumps(_spent, indent=1))
        if _tests:
            (Path(folder) / f"tests-{worker}.json").write_text(json.dumps(_tests, indent=1))


def pytest_unconfigure(config):
    """Back to the parent group; this one goes once nothing is left in it (what still runs keeps it)."""
    if _group:
        try:
            (_group[0].parent / "cgroup.procs").write_text(str(os.getpid()))
            _group[0].rmdir()
        except OSError:
            pass


def table(folder: Path) -> str:
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for path in sorted(folder.glob("cpu-*.json")):
        for name, spent in json.loads(path.read_text()).items():
            files[name] = [a + b for a, b in zip(files[name], spent + [0.0] * (4 - len(spent)))]
    total = [sum(column) for column in zip(*files.values())] if files else [0.0] * 4

    def row(name: str, wall: float, own: float, children: float, group: float) -> str:
        return f"| {name} | {wall:.0f} | {own:.0f} | {children:.0f} | {own + children:.0f} | {group:.0f} |"

    rows = [row(name, *spent) for name, spent in
            sorted(files.items(), key=lambda kv: -max(kv[1][1] + kv[1][2], kv[1][3]))]
    return "\n".join(["| file | wall s | own CPU s | children's CPU s | CPU s | group CPU s |",
                      "|---|---|---|---|---|---|", row(f"all {len(files)} files", *total), *rows])


if __name__ == "__main__":
    print(table(Path(sys.argv[1])))
