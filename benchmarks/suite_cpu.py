"""Where the test suite's CPU goes, per file: a pytest plugin (`pytest -p benchmarks.suite_cpu ...`).

The suite's time on 2 cores is bounded below by its CPU seconds over 2 (issue 37): two workers cannot finish
before the CPUs have done the work. This plugin adds up, per test file, the wall time and the CPU seconds of
the test process and of the children it reaped (a task, a kernel, a hub: RUSAGE_CHILDREN counts a process
once it and its waited-for descendants are reaped). Ray's and Slurm's daemons are not children: their CPU is
not in it. Each pytest process (each xdist worker) writes KWNB_SUITE_CPU_DIR/cpu-<worker>.json at its end;
`python -m benchmarks.suite_cpu DIR` sums them into a table, largest CPU first.
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
_spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])  # file: [wall, own CPU, children CPU]


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of one test, fixtures included (a session fixture counts where it starts)."""
    began, own, children = time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    yield
    spent = _spent[item.nodeid.split("::")[0]]
    spent[0] += time.monotonic() - began
    spent[1] += _cpu(resource.RUSAGE_SELF) - own
    spent[2] += _cpu(resource.RUSAGE_CHILDREN) - children


def pytest_sessionfinish(session):
    folder = os.environ.get(DIR_ENV)
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"cpu-{worker}.json").write_text(json.dumps(_spent, indent=1))


def table(folder: Path) -> str:
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for path in sorted(folder.glob("cpu-*.json")):
        for name, spent in json.loads(path.read_text()).items():
            files[name] = [a + b for a, b in zip(files[name], spent)]
    total = [sum(column) for column in zip(*files.values())] if files else [0.0, 0.0, 0.0]
    rows = [f"| {name} | {wall:.0f} | {own:.0f} | {children:.0f} | {own + children:.0f} |"
            for name, (wall, own, children) in sorted(files.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))]
    return "\n".join(["| file | wall s | own CPU s | children's CPU s | CPU s |", "|---|---|---|---|---|",
                      f"| all {len(files)} files | {total[0]:.0f} | {total[1]:.0f} | {total[2]:.0f} | "
                      f"{total[1] + total[2]:.0f} |", *rows])


if __name__ == "__main__":
    print(table(Path(sys.argv[1])))
