"""TensorBoard scalars become a real run's curves: a 2-worker custom loop that prints nothing
(tests/scripts/summary_loop.py) still gets its history, per epoch and per step."""
from __future__ import annotations

from pathlib import Path

import pytest

import kwnb
from kwnb.pictures.outputs import pictures_ready

SCRIPT = Path(__file__).parent / "scripts" / "summary_loop.py"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.mark.parametrize("logdir", [None, "elsewhere"])
def test_a_loop_that_prints_nothing_gets_curves_from_its_event_files(tmp_path, logdir):
    """In the working directory (found by itself) and in a folder named with --logdir (outside it)."""
    work = tmp_path / "work"
    work.mkdir()
    target = tmp_path / "outside" / "tb" if logdir else work / "logs"
    run = kwnb.launch(SCRIPT, n=2, name="summaries", args=str(target), runs_dir=tmp_path / "runs", cwd=work,
                      logdir=str(target) if logdir else None)
    assert run.wait(150) == [0, 0], run.summary()
    assert not any("Epoch" in line for line in run.logs(0).splitlines())  # the log holds no metrics
    history = run.history()
    assert [row["epoch"] for row in history] == [0, 1] and all("loss" in row and "accuracy" in row for row in history)
    steps = run.step_history()
    assert [row["step"] for row in steps] == list(range(1, 11)) and all("loss" in row for row in steps)
    assert run.workers[1].metrics.history() == []  # the chief's curves: the other worker wrote nothing
    assert pictures_ready(run) and (run.dir / "curves.png").is_file()
