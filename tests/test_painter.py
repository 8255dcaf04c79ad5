"""The kernel's drawing process (kwnb/pictures/painter.py): the dashboard's live curves, %kw_plot's figure and
the end-of-run pictures drawn there, the same pixels as drawn in-process, without the kernel importing
matplotlib; and where it cannot draw, the asker draws."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from kwnb.pictures import painter as painting
from kwnb.pictures.outputs import draw
from kwnb.pictures.plotting import LiveCurves, curves_figure, png_bytes

ROOT = Path(__file__).resolve().parents[1]
SERIES = {"fit": {"epochs": [{"epoch": e, "loss": 1 / (e + 1), "val_loss": 1.2 / (e + 1)} for e in range(4)],
                  "steps": [{"step": s, "loss": 1 / s} for s in range(1, 40)], "steps_per_epoch": 10}}


@pytest.fixture
def painter(monkeypatch):
    """A painter of the test's own, ended after it (the process's own one is left alone)."""
    own = painting.Painter()
    monkeypatch.setattr(painting, "_painter", own)
    yield own
    own.close()


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


def test_live_curves_drawn_by_the_painter_are_those_drawn_here(painter):
    here = LiveCurves(title="fit (chief)")
    for rows in (3, 39):  # the first picture builds the figure, the next moves its lines
        series = {"fit": dict(SERIES["fit"], steps=SERIES["fit"]["steps"][:rows])}
        png, cpu = painting.live_curves_png("a dashboard", "fit (chief)", series)
        assert np.array_equal(pixels(png), pixels(here.png(series)))
        assert 0 < cpu < 30  # the draw's CPU seconds, which set the gap to the next one
    assert painting.live_curves_png("a dashboard", "fit (chief)", {"fit": {"epochs": []}})[0] is None
    assert painter.running


def test_figure_and_plan_are_drawn_by_the_painter_as_here(painter, tmp_path):
    assert np.array_equal(pixels(painting.figure_png(SERIES, "t")), pixels(png_bytes(curves_figure(SERIES, "t"))))
    assert painting.figure_png({"fit": {"epochs": []}}) is None  # nothing to plot
    plan = {"curves": {"path": str(tmp_path / "c.png"), "series": SERIES, "title": "fit"},
            "timeline": {"path": str(tmp_path / "t.png"), "data": None}}
    assert painting.draw_plan(plan) == []
    plan["curves"]["path"] = str(tmp_path / "here.png")
    assert draw(plan) == []
    assert np.array_equal(pixels((tmp_path / "c.png").read_bytes()), pixels((tmp_path / "here.png").read_bytes()))


def test_a_plan_is_not_drawn_by_a_painter_that_is_not_running(painter, tmp_path):
    """A painter's start costs what a process of its own costs: outputs.py starts that instead."""
    assert painting.draw_plan({"curves": {}, "timeline": {}}) is None and not painter.running


def test_what_the_painter_cannot_draw_is_drawn_by_the_asker(painter):
    assert painter.ask({"kind": "figure", "title": "", "series": {"fit": {"epochs": [{"epoch": object()}]}}}) is None
    assert painter.ask({"kind": "no such kind"}) is None  # the process raised: it keeps serving
    assert painter.running and painting.figure_png(SERIES) is not None


def test_a_painter_that_cannot_start_leaves_the_drawing_to_the_asker(painter, monkeypatch):
    def cannot_start():
        raise OSError("no such interpreter")

    monkeypatch.setattr(painter, "_start", cannot_start)
    assert painting.live_curves_png("k", "t", SERIES) is None
    monkeypatch.undo()
    assert painter.ask({"kind": "forget", "key": "k"}) is None, "a broken painter is not started again"
    assert painting.figure_png(SERIES).startswith(b"\x89PNG")  # drawn here


def test_a_painter_that_stops_answering_is_ended(painter, monkeypatch):
    monkeypatch.setattr(painting, "ANSWER_TIMEOUT", 0.2)
    monkeypatch.setattr(painter, "_start", lambda: setattr(painter, "_process", subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        bufsize=0)) or painter._process)
    assert painting.live_curves_png("k", "t", SERIES) is None
    assert painter._process.poll() is not None, "the silent process was left running"


IN_A_KERNEL = """
import json, sys, time, types
from pathlib import Path
from kwnb.engine.records.snapshot import RunSnapshot, TaskView
from kwnb.notebook import curves_view
from kwnb.pictures import painter
from kwnb.task.tf_config import TaskId

chief = TaskView(position=0, id=TaskId("worker", 0), is_chief=True, status="running", phase="training",
                 steps=tuple({"step": s, "loss": 1 / s} for s in range(1, 30)), steps_per_epoch=100)
run = RunSnapshot(name="r", dir=Path("/nonexistent"), status="running", done=False, tasks=(chief,), started_at=0.0)
view = curves_view.CurvesView("d", "r (chief)")
view.refresh(run, force=True)
picture, state = view.image, types.SimpleNamespace(_curves_gap=view._gap)
child = painter.painter()._process.pid
print(json.dumps({"png": picture.value[:4] == b"\\x89PNG", "matplotlib": "matplotlib" in sys.modules,
                  "gap": state._curves_gap, "painter": child}))
"""


def test_the_dashboard_draws_its_curves_without_importing_matplotlib():
    """Issue 31: matplotlib cost a kernel about 0.5 CPU-s and 40 MB for good; the painter pays them instead,
    and its import is not counted as the first draw's cost (the throttle's gap would be seconds long)."""
    done = subprocess.run([sys.executable, "-c", IN_A_KERNEL], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["png"] and not result["matplotlib"]
    assert result["gap"] < 0.5 / 0.05, "the painter's matplotlib import was counted as a draw"


def test_a_dashboard_with_nothing_to_draw_yet_does_not_wait_for_the_painter():
    """A first cell's dashboard was shown 1.1-1.3 s late: its first refresh waited for the painter's start
    and matplotlib import to hear that there was nothing to draw (issue 31)."""
    nothing_yet = IN_A_KERNEL.replace("steps=tuple({\"step\": s, \"loss\": 1 / s} for s in range(1, 30))", "steps=()")
    nothing_yet = nothing_yet.replace("child = painter.painter()._process.pid", "child = painter.painter()._process")
    assert nothing_yet != IN_A_KERNEL
    done = subprocess.run([sys.executable, "-c", nothing_yet], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["painter"] is None and not result["png"]


def test_prepare_starts_the_painter_at_once_and_the_first_picture_uses_it(painter, monkeypatch):
    painter.prepare()
    started = painter._process
    assert painter.running
    painter.prepare()  # already running: the same process
    assert painter._process is started
    assert painting.live_curves_png("k", "t", SERIES)[0].startswith(b"\x89PNG") and painter._process is started
    broken = painting.Painter()
    monkeypatch.setattr(broken, "_start", lambda: (_ for _ in ()).throw(OSError("no such interpreter")))
    broken.prepare()
    assert not broken.running and broken.ask({"kind": "forget", "key": "k"}) is None


LOAD_EXTENSION = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from kwnb.pictures.painter import painter
InteractiveShell.instance().run_line_magic("load_ext", "kwnb")
print(json.dumps({"running": painter().running, "argv": painter()._process.args, "matplotlib": "matplotlib" in sys.modules}))
"""


def test_loading_the_extension_starts_the_painter_while_the_learner_reads():
    done = subprocess.run([sys.executable, "-c", LOAD_EXTENSION], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "KWNB_WARM": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["running"] and "kwnb.pictures.painter" in result["argv"] and not result["matplotlib"]
