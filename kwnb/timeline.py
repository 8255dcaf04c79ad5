"""The run's timeline: one lane per task, time across, coloured by phase, restarts and kills marked.

Who waited for whom, and for how long: the picture a teacher shows. Drawn with matplotlib's Figure
and the Agg canvas (never pyplot), live in the dashboard and as timeline.png when the run ends,
from a RunSnapshot (engine/snapshot.py): a live run's or a past run's.
"""
from __future__ import annotations

import io
import time

from .engine.snapshot import as_snapshot

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

# Colour-blind-safe (Okabe-Ito), on the PNG's own white background whatever the notebook's theme.
PHASE_COLOURS = {"pending": "#CC79A7", "starting": "#E69F00", "joining": "#D55E00", "training": "#0072B2",
                 "finishing": "#56B4E9"}
END_MARKS = {"finished": ("o", "#009E73"), "failed": ("X", "#C62828"), "stopped": ("s", "#616161")}


def segments(task, now: float) -> list[tuple[float, float, str]]:
    """(start, end, phase) of each stretch a task spent alive, across restarts."""
    phases = task.phases
    ends = [start for start, _ in phases[1:]] + [task.ended_at or now]
    return [(start, end, phase) for (start, phase), end in zip(phases, ends) if phase in PHASE_COLOURS]


def timeline_figure(run, now: float | None = None) -> Figure | None:
    run = as_snapshot(run)
    if run.started_at is None or not any(task.phases for task in run.workers):
        return None
    now, origin = now or run.ended_at or time.time(), run.started_at
    # Margins fixed by hand in inches: constrained layout doubled the cost of a draw (~120 ms here).
    height = 0.42 * len(run.workers) + 1.25
    figure = Figure(figsize=(8.4, height), dpi=90)
    FigureCanvasAgg(figure)
    axis = figure.subplots()
    figure.subplots_adjust(left=1.45 / 8.4, right=0.98, top=1 - 0.3 / height, bottom=0.8 / height)
    labels = []
    for lane, task in enumerate(run.workers):
        labels.append(task.label)
        for start, end, phase in segments(task, now):
            axis.broken_barh([(start - origin, max(end - start, 0.01))], (lane - 0.35, 0.7),
                             facecolors=PHASE_COLOURS[phase])
        for start, phase in task.phases:
            if phase in END_MARKS:
                marker, colour = END_MARKS[phase]
                axis.plot([start - origin], [lane], marker=marker, color=colour, markersize=8, linestyle="none")
        restarts = [start for (start, phase), (_, before) in zip(task.phases[1:], task.phases)
                    if phase == "starting" and before != "starting"]
        for start in restarts:
            axis.axvline(start - origin, ymin=0, ymax=1, color="#444444", linewidth=0.8, linestyle=":")
    axis.set_yticks(range(len(run.workers)), labels)
    axis.invert_yaxis()  # the chief on top, as in the overview
    axis.set_xlim(0, max(now - origin, 1.0) * 1.02)
    axis.set_xlabel("seconds since launch")
    axis.grid(axis="x", alpha=0.3)
    seen = {phase for task in run.workers for _, phase in task.phases}
    handles = [Patch(color=colour, label=phase) for phase, colour in PHASE_COLOURS.items() if phase in seen]
    figure.legend(handles=handles, loc="lower center", ncol=4, fontsize="small", frameon=False)
    axis.set_title(f"{run.name}: phases of each task", fontsize="medium")
    return figure


def timeline_png(run) -> bytes | None:
    figure = timeline_figure(run)
    if figure is None:
        return None
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def save_timeline(run, path) -> None:
    run = as_snapshot(run)
    figure = timeline_figure(run, now=run.ended_at)
    if figure is not None:
        figure.savefig(path)
