"""The dashboard's curves (kwnb/notebook/curves_view.py): drawn in a thread of their own by a painter that gives
way to training, so a slow draw never holds the dashboard, and the run's last picture is never replaced by an
older live one."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil

from kwnb.engine.records.snapshot import RunSnapshot, TaskView
from kwnb.notebook import curves_view
from kwnb.pictures import painter as painting
from kwnb.task.tf_config import TaskId


def snapshot(steps: int, done: bool = False) -> RunSnapshot:
    chief = TaskView(position=0, id=TaskId("worker", 0), is_chief=True, status="finished" if done else "running",
                     phase="training", steps=tuple({"step": s, "loss": 1 / s} for s in range(1, steps + 1)),
                     steps_per_epoch=100)
    return RunSnapshot(name="r", dir=Path("/nonexistent"), status="finished" if done else "running", done=done,
                       tasks=(chief,), started_at=0.0)


def test_a_slow_draw_does_not_hold_the_dashboard_and_one_draw_goes_at_a_time(monkeypatch):
    release, asked = threading.Event(), []

    def slow_painter(key, title, series):  # a painter answering late, as at niceness 10 beside training
        asked.append(len(series["r"]["steps"]))
        release.wait(30)
        return b"\x89PNG one", 0.01

    monkeypatch.setattr(curves_view, "live_curves_png", slow_painter)
    view = curves_view.CurvesView("d", "r (chief)")
    started = time.monotonic()
    view.refresh(snapshot(5))
    view.refresh(snapshot(9))  # a draw is going: no second one
    assert time.monotonic() - started < 5, "the refresh waited for the painter"
    assert view.image.value == b"" and asked == [5]
    release.set()
    view.settle(30)
    assert view.image.value == b"\x89PNG one" and view.image.layout.display is None and view.note.value == ""


def test_a_live_draw_that_ends_after_the_final_picture_does_not_replace_it(monkeypatch, tmp_path):
    release = threading.Event()
    monkeypatch.setattr(curves_view, "live_curves_png", lambda *args: release.wait(30) and (b"\x89PNG live", 0.01))
    view = curves_view.CurvesView("d", "r (chief)")
    view.refresh(snapshot(5))  # a live draw, still going when the run ends
    monkeypatch.setattr(curves_view, "live_curves_png", lambda *args: (b"\x89PNG final", 0.01))
    view.refresh(snapshot(9, done=True), force=True)  # no curves.png saved: drawn here, final
    assert view.image.value == b"\x89PNG final"
    release.set()
    view.settle(30)
    assert view.image.value == b"\x89PNG final", "an older live picture replaced the run's last one"


def test_the_painter_gives_way_to_training(monkeypatch):
    own = painting.Painter()
    monkeypatch.setattr(painting, "_painter", own)
    own.prepare()
    try:
        process = psutil.Process(own._process.pid)
        deadline = time.monotonic() + 60
        while process.nice() != painting.NICE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.nice() == painting.NICE == 10
    finally:
        own.close()
