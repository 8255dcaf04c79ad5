"""One rule for sizes (kwnb/machine/sizes.py): binary units, as cgroups and JupyterHub count, and the
same words for the same bytes wherever kwnb shows them."""
from __future__ import annotations

from pathlib import Path

import pytest

from kwnb import doctor
from kwnb.backends import warm_room
from kwnb.engine.records.snapshot import RunSnapshot, TaskView
from kwnb.engine.records.summary import format_summary
from kwnb.machine.limits import Limits
from kwnb.machine.sizes import format_size
from kwnb.notebook import overview
from kwnb.task.tf_config import TaskId

GiB = 1 << 30


@pytest.mark.parametrize("count, shown", [
    (2 * GiB, "2.0 GiB"), (1.5 * GiB, "1.5 GiB"), (1_500_000_000, "1.4 GiB"), (64 * GiB, "64 GiB"),
    (657 << 20, "657 MiB"), (12 << 10, "12 KiB"), (512, "512 B"), (0, "0 B"),
    ((1 << 20) - 1, "1.0 MiB"),  # never "1024 KiB"
    (9.97 * GiB, "10 GiB"),  # never "10.0 GiB": one decimal below 10 only
])
def test_sizes_are_binary_with_one_decimal_below_ten(count, shown):
    assert format_size(count) == shown


def limits_of(memory: int) -> Limits:
    return Limits(memory, "MEM_LIMIT", memory // 4, 2.0, "CPU_LIMIT", None)


@pytest.mark.parametrize("size, shown", [(2 * GiB, "2.0 GiB"), (1_500_000_000, "1.4 GiB")])
def test_a_size_reads_the_same_in_the_doctor_the_overview_and_the_summary(size, shown, monkeypatch):
    """JupyterHub's mem_limit = '2G' is 2 GiB: the doctor said "2.1 GB" and the summary "2.0 GB"; 1.5e9
    bytes were "1.5 GB" in the doctor and "1.4 GB" in the overview."""
    limits = limits_of(size)
    monkeypatch.setattr(overview, "read_limits", lambda: limits)  # the session's memory line, under the table
    monkeypatch.setattr(overview, "_limits", [0.0, None])  # not another test's cached limits
    task = TaskView(position=0, id=TaskId("worker", 0), is_chief=True, status="finished", phase="finished",
                    peak_rss=size)
    run = RunSnapshot(name="r", dir=Path("/nonexistent"), status="finished", done=True, tasks=(task,))
    table = format_summary(run).split("overview:\n")[1].splitlines()  # the summary's text overview
    assert table[1].split() == ["worker", "0", "(chief)", "finished", "finished", "-", "-", "-", "peak", *shown.split(),
                                "0", "-"], table
    assert f"<td>peak {shown}</td>" in overview.overview_html(run, ())
    assert overview.memory_line().startswith(f"memory: {format_size(size // 4)} of {shown} (MEM_LIMIT)")
    assert limits.describe().startswith(f"{shown} of memory (MEM_LIMIT)")
    assert f"of {shown}, MEM_LIMIT" in warm_room.cap(limits).why
    memory, _ = doctor.limit_checks(limits)
    assert memory.text.startswith(f"{shown} ($MEM_LIMIT, set by JupyterHub)"), memory.text
