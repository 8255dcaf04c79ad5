"""What a finished run leaves in its folder for people to read: curves.png, timeline.png and summary.txt.

`kwnb.launch` (kwnb/api.py) registers `write_outputs` as the run's on_end callback, so the engine
announces the end and never imports plotting. The run is done when its tasks have ended: `write_outputs`
writes summary.txt and returns the pictures as work for after the end (engine/live/after_end.py), which the
engine runs in a thread of its own (drawing them cold took about 1.3 s, 1.26x a bare launch's whole run where
the engine alone was 1.04x: issue 31); it writes summary.txt again, naming them. That thread is not a daemon:
a script that exits right after `wait()` still gets its pictures. Whoever shows them waits with
`pictures_ready`; a caller that wants curves.png with `Run.wait(pictures=True)`.
What could not be drawn is noted in the run's notes, summary.txt and, written again, run.json.

The two pictures are drawn from plain data (`drawing_plan`). The timeline is drawn here, with Pillow
(pictures/timeline.py). The curves need matplotlib: where the calling process runs a painter (a kernel:
pictures/painter.py), the painter draws them; where it has loaded matplotlib, they are drawn here; else a
subprocess draws them, and the process's next runs start its painter: importing matplotlib and a first draw
would cost the kernel about 0.5 CPU-s and 45 MB for good, and a process of its own about 1 s.
`python -m kwnb.pictures.outputs` reads a plan on stdin and prints the notes of what it could not draw.
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..engine.live.after_end import AfterEnd
from ..engine.live.log import for_run
from ..engine.records.record import write_result
from ..engine.records.summary import format_summary
from .painter import draw, draw_plan, drawing_env

DRAW_TIMEOUT = 60.0  # seconds; a subprocess that takes longer is given up and the pictures drawn here



@dataclass
class Drawing:
    """A run's pictures being drawn: `done` once they are, by `thread`."""

    done: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


_drawing: dict[Path, Drawing] = {}  # a run's folder: its pictures being drawn
_drew_elsewhere = threading.Event()  # this process drew a run's pictures in a subprocess: its painter draws the next


def drawing_plan(run) -> dict:
    """Everything the pictures show, as JSON-safe data, and where each goes (`run`: a RunSnapshot or a Run)."""
    from ..engine.records.snapshot import as_snapshot
    from .plotting import run_series
    from .timeline import timeline_data

    run = as_snapshot(run)
    return {"curves": {"path": str(run.folder.curves), "series": run_series(run), "title": f"{run.name} (chief)"},
            "timeline": {"path": str(run.folder.timeline), "data": timeline_data(run, now=run.ended_at)}}


def draw_elsewhere(plan: dict) -> list[str]:
    """Draw the plan in a subprocess of this Python; here after all if that fails."""
    try:
        done = subprocess.run([sys.executable, "-m", "kwnb.pictures.outputs"], input=json.dumps(plan), capture_output=True,
                              text=True, env=drawing_env(), timeout=DRAW_TIMEOUT, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return draw(plan)


def write_outputs(run) -> AfterEnd:
    """summary.txt now; then, after the end, curves.png (when there is something to plot) and timeline.png,
    and summary.txt again, naming them."""
    _write_summary(run)
    _drawing[Path(run.dir)] = Drawing()  # before the run is done: pictures_ready waits from then on
    return AfterEnd(f"kwnb-pictures-{run.name}", functools.partial(draw_pictures, run))


def pictures_ready(run, timeout: float | None = 2 * DRAW_TIMEOUT) -> bool:
    """Wait until the run's pictures are drawn (at most `timeout` seconds); whether they are. A run that draws
    none (a past run, a run the engine launched without kwnb.launch) is ready at once."""
    drawing = _drawing.get(Path(run.dir))
    if drawing is None or drawing.thread is threading.current_thread():
        return True
    return drawing.done.wait(timeout)


def draw_pictures(run, note: Callable[[str], None]) -> None:
    """curves.png and timeline.png from the run as it ended, then summary.txt, which names them; the notes of
    what could not be drawn go to the run (`note`), summary.txt and run.json."""
    drawing = _drawing.get(Path(run.dir)) or Drawing()
    drawing.thread = threading.current_thread()
    try:
        _record_notes(run, _pictures_of(run), note)
    finally:
        _write_summary(run)  # after the notes about the pictures
        _drawing.pop(Path(run.dir), None)
        drawing.done.set()


def _pictures_of(run) -> list[str]:
    """Draw the run's pictures; a note for each that could not be drawn."""
    try:
        from .plotting import curve_lines

        plan = drawing_plan(run.snapshot())
        notes = draw({"timeline": plan["timeline"]})  # with Pillow, here: a few ms
        if curve_lines(plan["curves"]["series"]):
            notes += _draw_where_quickest({"curves": plan["curves"]})
        return notes
    except Exception as error:  # the summary must be written whatever went wrong with the pictures
        for_run(run.dir).error("could not draw the run's pictures", exc_info=error)
        return [f"could not draw the run's pictures: {error}"]


def _record_notes(run, notes: list[str], note: Callable[[str], None]) -> None:
    """The notes into the run, and into run.json, which the run's end wrote without them: once it has."""
    for text in notes:
        for_run(run.dir).error(text)
        note(text)
    if notes:
        run.wait(DRAW_TIMEOUT)  # done: record_result, an on_end callback before it, has written run.json
        write_result(run.snapshot())


def _draw_where_quickest(plan: dict) -> list[str]:
    """In this process's painter if it runs (the dashboard's live curves started it), here if matplotlib is
    loaded, else the first time in a subprocess of its own and from then on in this process's painter, started
    then: each skips a matplotlib import the others would pay. A process whose runs end one after another (a
    sweep, `kwnb.launch` in a loop, a test suite) pays it twice in all, not once a run (about 1.3 CPU-s each)."""
    notes = draw_plan(plan)
    if notes is None and "matplotlib.figure" in sys.modules:
        return draw(plan)
    if notes is None and _drew_elsewhere.is_set():
        notes = draw_plan(plan, start=True)
    if notes is None:
        _drew_elsewhere.set()
        return draw_elsewhere(plan)
    return notes


def _write_summary(run) -> None:
    snapshot = run.snapshot()
    snapshot.folder.summary.write_text(format_summary(snapshot) + "\n")


if __name__ == "__main__":
    print(json.dumps(draw(json.load(sys.stdin))))
