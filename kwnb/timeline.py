"""The run's timeline: one lane per task, time across, coloured by phase, restarts and kills marked.

Who waited for whom, and for how long: the picture a teacher shows. `timeline_data(run)` takes what it
needs from a run as plain data; the live dashboard draws that as SVG text (no matplotlib: a draw costs
about 1 ms, where matplotlib's cost 60-120 ms, and importing matplotlib costs a kernel 0.4 CPU-s and
40 MB), and the run's timeline.png is drawn from the same data with matplotlib's Figure and the Agg
canvas (never pyplot), in a subprocess where the kernel has not loaded matplotlib (kwnb/outputs.py).
"""
from __future__ import annotations

import html
import io
import math
import time

# Colour-blind-safe (Okabe-Ito), on the picture's own white background whatever the notebook's theme.
PHASE_COLOURS = {"pending": "#CC79A7", "starting": "#E69F00", "joining": "#D55E00", "training": "#0072B2",
                 "finishing": "#56B4E9"}
END_MARKS = {"finished": ("o", "#009E73"), "failed": ("X", "#C62828"), "stopped": ("s", "#616161")}
DPI, WIDTH_IN, LEFT_IN = 90, 8.4, 1.45  # both drawings share the PNG's size and margins (inches)


def segments(task, now: float) -> list[tuple[float, float, str]]:
    """(start, end, phase) of each stretch a task spent alive, across restarts."""
    return _segments(task.vitals.phases, task.ended_at, now)


def _segments(phases, ended_at, now: float) -> list[tuple[float, float, str]]:
    ends = [start for start, _ in phases[1:]] + [ended_at or now]
    return [(start, end, phase) for (start, phase), end in zip(phases, ends) if phase in PHASE_COLOURS]


def timeline_data(run, now: float | None = None) -> dict | None:
    """What the timeline shows, as plain data (JSON-safe): None before any task has a phase."""
    if run.started_at is None or not any(task.vitals.phases for task in run.workers):
        return None
    return {"name": run.name, "origin": run.started_at, "now": now or run.ended_at or time.time(),
            "lanes": [{"label": f"{task.id}" + (" (chief)" if task.is_chief else ""), "ended_at": task.ended_at,
                       "phases": [list(p) for p in task.vitals.phases]} for task in run.workers]}


def _restarts(phases) -> list[float]:
    return [start for (start, phase), (_, before) in zip(phases[1:], phases) if phase == "starting" and before != "starting"]


def _height(data: dict) -> float:
    return 0.42 * len(data["lanes"]) + 1.25


def timeline_figure(data: dict):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    now, origin, lanes = data["now"], data["origin"], data["lanes"]
    # Margins fixed by hand in inches: constrained layout doubled the cost of a draw (~120 ms here).
    height = _height(data)
    figure = Figure(figsize=(WIDTH_IN, height), dpi=DPI)
    FigureCanvasAgg(figure)
    axis = figure.subplots()
    figure.subplots_adjust(left=LEFT_IN / WIDTH_IN, right=0.98, top=1 - 0.3 / height, bottom=0.8 / height)
    for lane, task in enumerate(lanes):
        for start, end, phase in _segments(task["phases"], task["ended_at"], now):
            axis.broken_barh([(start - origin, max(end - start, 0.01))], (lane - 0.35, 0.7),
                             facecolors=PHASE_COLOURS[phase])
        for start, phase in task["phases"]:
            if phase in END_MARKS:
                marker, colour = END_MARKS[phase]
                axis.plot([start - origin], [lane], marker=marker, color=colour, markersize=8, linestyle="none")
        for start in _restarts(task["phases"]):
            axis.axvline(start - origin, ymin=0, ymax=1, color="#444444", linewidth=0.8, linestyle=":")
    axis.set_yticks(range(len(lanes)), [task["label"] for task in lanes])
    axis.invert_yaxis()  # the chief on top, as in the overview
    axis.set_xlim(0, max(now - origin, 1.0) * 1.02)
    axis.set_xlabel("seconds since launch")
    axis.grid(axis="x", alpha=0.3)
    seen = {phase for task in lanes for _, phase in task["phases"]}
    handles = [Patch(color=colour, label=phase) for phase, colour in PHASE_COLOURS.items() if phase in seen]
    figure.legend(handles=handles, loc="lower center", ncol=4, fontsize="small", frameon=False)
    axis.set_title(f"{data['name']}: phases of each task", fontsize="medium")
    return figure


def timeline_png(data: dict) -> bytes:
    buffer = io.BytesIO()
    timeline_figure(data).savefig(buffer, format="png")
    return buffer.getvalue()


def save_timeline(data: dict, path) -> None:
    timeline_figure(data).savefig(path)


def _tick_step(span: float) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving 4-8 ticks across `span` seconds."""
    raw = span / 6
    power = 10 ** math.floor(math.log10(raw))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= raw)


def _mark(kind: str, colour: str, x: float, y: float) -> str:
    if kind == "o":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="{colour}"/>'
    if kind == "s":
        return f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="{colour}"/>'
    return (f'<path d="M{x - 4:.1f},{y - 4:.1f}L{x + 4:.1f},{y + 4:.1f}M{x - 4:.1f},{y + 4:.1f}L{x + 4:.1f},{y - 4:.1f}" '
            f'stroke="{colour}" stroke-width="3"/>')


def timeline_svg(data: dict) -> str:
    """The same picture as timeline_figure, as SVG text: lanes, phase bars, end marks, restarts, axis, legend."""
    now, origin, lanes = data["now"], data["origin"], data["lanes"]
    width, height = WIDTH_IN * DPI, _height(data) * DPI
    left, right, top, bottom = LEFT_IN * DPI, 0.98 * width, 0.3 * DPI, height - 0.8 * DPI
    span = max(now - origin, 1.0) * 1.02
    lane_h = (bottom - top) / max(len(lanes), 1)

    def x(t: float) -> float:
        return left + (t - origin) / span * (right - left)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'font-family="DejaVu Sans, sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="#fff"/>',
           f'<text x="{(left + right) / 2:.1f}" y="{top - 8:.1f}" text-anchor="middle" font-size="12">'
           f'{html.escape(data["name"])}: phases of each task</text>']
    step = _tick_step(span)
    for i in range(int(span / step) + 1):
        tx = left + i * step / span * (right - left)
        out.append(f'<line x1="{tx:.1f}" y1="{top:.1f}" x2="{tx:.1f}" y2="{bottom:.1f}" stroke="#000" stroke-opacity="0.15"/>'
                   f'<text x="{tx:.1f}" y="{bottom + 14:.1f}" text-anchor="middle">{i * step:g}</text>')
    for lane, task in enumerate(lanes):
        middle = top + (lane + 0.5) * lane_h
        out.append(f'<text x="{left - 6:.1f}" y="{middle + 4:.1f}" text-anchor="end">{html.escape(task["label"])}</text>')
        for start, end, phase in _segments(task["phases"], task["ended_at"], now):
            out.append(f'<rect x="{x(start):.1f}" y="{middle - 0.35 * lane_h:.1f}" width="{max(x(end) - x(start), 0.5):.1f}" '
                       f'height="{0.7 * lane_h:.1f}" fill="{PHASE_COLOURS[phase]}"><title>{phase}</title></rect>')
        for start in _restarts(task["phases"]):
            out.append(f'<line x1="{x(start):.1f}" y1="{top:.1f}" x2="{x(start):.1f}" y2="{bottom:.1f}" '
                       f'stroke="#444" stroke-dasharray="1,2"/>')
        out.extend(_mark(*END_MARKS[phase], x(start), middle) for start, phase in task["phases"] if phase in END_MARKS)
    out.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" height="{bottom - top:.1f}" '
               f'fill="none" stroke="#000"/>'
               f'<text x="{(left + right) / 2:.1f}" y="{bottom + 30:.1f}" text-anchor="middle">seconds since launch</text>')
    seen = {phase for task in lanes for _, phase in task["phases"]}
    shown = [(phase, colour) for phase, colour in PHASE_COLOURS.items() if phase in seen]
    for i, (phase, colour) in enumerate(shown):
        lx = width / 2 + (i - len(shown) / 2) * 95
        out.append(f'<rect x="{lx:.1f}" y="{height - 20:.1f}" width="16" height="9" fill="{colour}"/>'
                   f'<text x="{lx + 21:.1f}" y="{height - 11:.1f}">{phase}</text>')
    return "".join(out) + "</svg>"
