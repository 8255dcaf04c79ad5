"""The dashboard's curves: the chief's metrics (and a sidecar evaluator's), redrawn while the run goes.

Drawn by the kernel's painter (pictures/painter.py), which runs at a low priority so that its drawing
never takes CPU from the training it shows, in a thread of their own, so that a draw the painter answers
late (seconds, while the tasks keep both cores busy) never holds the dashboard's tabs and log. One draw at a
time: a refresh while one is going asks again at the next refresh. At most once every CURVES_SECONDS,
longer where a draw would take more than CURVES_CPU_SHARE of a core (a slow Binder machine), and only when
something moved. At the end, and for a past run, the picture is the curves.png the run saved.

The drawing thread only makes the picture: the widgets are changed by whoever refreshes or settles the view
(the dashboard's thread, or the cell that follows a run on Colab, whose front end paints nothing sent from
another thread: notebook/live_mode.py).
"""
from __future__ import annotations

import threading
import time

import ipywidgets as widgets

from ..pictures.painter import live_curves_png
from ..pictures.plotting import LiveCurves, curve_lines, load_drawing, run_series

CURVES_SECONDS = 1.5
# The kernel shares the CPU with the workers it watches: curves may cost at most this share of a core.
CURVES_CPU_SHARE = 0.05


def curves_gap(draw_cpu_seconds: float) -> float:
    """Seconds until the next curves redraw, given what the last one cost."""
    return max(CURVES_SECONDS, draw_cpu_seconds / CURVES_CPU_SHARE)


def moved(run) -> tuple:
    """What the curves show has changed when this has: the chief's epochs and steps, an evaluator's epochs."""
    chief = run.chief
    return (len(chief.epochs), len(chief.steps), chief.steps[-1]["step"] if chief.steps else None,
            sum(len(task.epochs) for task in run.tasks if task.task_type == "evaluator"))


class CurvesView:
    """The curves' image and the note shown until there is one; `painter_key` names its figure in the painter."""

    def __init__(self, painter_key: str, title: str):
        self.painter_key = painter_key
        # Hidden until the first PNG (an empty Image is a broken-image icon); never drawn wider than
        # the PNG itself, which would blur it.
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", align_self="flex-start",
                                                                       margin="2px 0", display="none"))
        self.note = widgets.HTML("<i>Curves appear once the chief reports a step or an epoch.</i>")
        self._live = LiveCurves(title=title)
        self._lock = threading.Lock()  # guards what follows, shared with the drawing thread
        self._shown, self._at, self._gap = None, 0.0, CURVES_SECONDS  # what was drawn last, when, the wait after
        self._drawing: threading.Thread | None = None
        self._final = False  # the run's last picture is shown: a live draw finishing later must not replace it
        self._drawn: bytes | None = None  # a picture the drawing thread made, shown at the next refresh or settle

    def refresh(self, run, force: bool = False) -> None:
        """Redraw if something moved and the gap has passed (`force`: whatever the gap, and in this thread)."""
        self._show_drawn()
        key, now = moved(run), time.monotonic()
        with self._lock:
            if key == self._shown or (not force and (now - self._at < self._gap or self._drawing is not None)):
                return
        saved = run.curves_path if run.past or run.done else None  # the PNG its run saved, the same lines
        if saved is not None:
            self._show(saved.read_bytes(), 0.0, key, now, final=True)
        elif force:
            self._draw(run, key, now, here=True)
        else:
            with self._lock:
                self._drawing = threading.Thread(target=self._draw, args=(run, key, now), daemon=True,
                                                 name=f"kwnb-curves-{run.name}")
                self._drawing.start()

    def _draw(self, run, key: tuple, now: float, here: bool = False) -> None:
        try:
            png, cost = self._draw_png(run)
            if png is not None:
                self._show(png, cost, key, now, final=run.done, here=here)
        finally:
            with self._lock:
                if self._drawing is threading.current_thread():
                    self._drawing = None

    def _draw_png(self, run) -> tuple[bytes | None, float]:
        """The curves and the CPU seconds they cost: drawn by the painter, so the kernel never imports
        matplotlib; here, with LiveCurves, where the painter cannot draw."""
        series = run_series(run)
        if not curve_lines(series):  # nothing to draw yet: no need to wait for the painter
            return None, 0.0
        drawn = live_curves_png(self.painter_key, self._live.title, series)
        if drawn is not None:
            return drawn
        load_drawing()  # a one-off, not the redraw's cost: outside the measured time
        cpu = time.thread_time()
        return self._live.png(series), time.thread_time() - cpu

    def _show(self, png: bytes, cost: float, key: tuple, now: float, final: bool, here: bool = True) -> None:
        """Record the picture; shown now when drawn in the refreshing thread, else at its next refresh."""
        with self._lock:
            if self._final and not final:
                return
            self._final = final
            self._shown, self._at, self._gap = key, now, curves_gap(cost)
            self._drawn = None if here else png
        if here:
            self._set_image(png)

    def _show_drawn(self) -> None:
        with self._lock:
            png, self._drawn = self._drawn, None
        if png is not None:
            self._set_image(png)

    def _set_image(self, png: bytes) -> None:
        self.image.value = png
        self.image.layout.display = None
        self.note.value = ""

    def settle(self, timeout: float) -> None:
        """Wait for a draw in progress (the run's end shows its own picture after it)."""
        with self._lock:
            drawing = self._drawing
        if drawing is not None:
            drawing.join(timeout)
        self._show_drawn()
