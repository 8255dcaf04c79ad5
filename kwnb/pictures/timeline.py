"""The run's timeline: one lane per task, time across, coloured by phase, restarts and kills marked.

Who waited for whom, and for how long: the picture a teacher shows. `timeline_data(run)` takes what it
needs from a RunSnapshot (engine/records/snapshot.py: a live run's or a past run's) as plain data, and
`timeline_png` draws that with Pillow, live in the dashboard and as the run's timeline.png at its end.
Not matplotlib: importing it costs a kernel 0.4 CPU-s and 40 MB, Pillow 0.02 s and 4 MB, and a draw takes
a few ms where matplotlib's took 60-150, which a first cell's end waited for (issue 31).
"""
from __future__ import annotations

import io
import math
import time
from pathlib import Path

from ..engine.records.snapshot import as_snapshot

# Colour-blind-safe (Okabe-Ito), on the picture's own white background whatever the notebook's theme.
PHASE_COLOURS = {"pending": "#CC79A7", "starting": "#E69F00", "joining": "#D55E00", "serving": "#009E73",
                 "training": "#0072B2", "finishing": "#56B4E9"}
END_MARKS = {"finished": ("o", "#009E73"), "failed": ("X", "#C62828"), "stopped": ("s", "#616161")}
DPI, WIDTH_IN, LEFT_IN = 90, 8.4, 1.45  # the PNG's size and margins, in inches at DPI (the curves' 90 dpi)


def segments(task, now: float) -> list[tuple[float, float, str]]:
    """(start, end, phase) of each stretch a task spent alive, across restarts."""
    return _segments(task.phases, task.ended_at, now)


def _segments(phases, ended_at, now: float) -> list[tuple[float, float, str]]:
    ends = [start for start, _ in phases[1:]] + [ended_at or now]
    return [(start, end, phase) for (start, phase), end in zip(phases, ends) if phase in PHASE_COLOURS]


def timeline_data(run, now: float | None = None) -> dict | None:
    """What the timeline shows, as plain data (JSON-safe): None before any task has a phase."""
    run = as_snapshot(run)
    if run.started_at is None or not any(task.phases for task in run.workers):
        return None
    return {"name": run.name, "origin": run.started_at, "now": now or run.ended_at or time.time(),
            "lanes": [{"label": task.label, "ended_at": task.ended_at,
                       "phases": [list(p) for p in task.phases]} for task in run.workers]}


def _restarts(phases) -> list[float]:
    return [start for (start, phase), (_, before) in zip(phases[1:], phases) if phase == "starting" and before != "starting"]


def _height(data: dict) -> float:
    return 0.42 * len(data["lanes"]) + 1.25


def timeline_size(data: dict) -> tuple[int, int]:
    """The picture's size in pixels."""
    return round(WIDTH_IN * DPI), round(_height(data) * DPI)


def _tick_step(span: float) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving 4-8 ticks across `span` seconds."""
    raw = span / 6
    power = 10 ** math.floor(math.log10(raw))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= raw)


def _mark(draw, kind: str, colour: str, x: float, y: float) -> None:
    if kind == "o":
        draw.ellipse([x - 4.5, y - 4.5, x + 4.5, y + 4.5], fill=colour)
    elif kind == "s":
        draw.rectangle([x - 4, y - 4, x + 4, y + 4], fill=colour)
    else:
        draw.line([x - 4, y - 4, x + 4, y + 4], fill=colour, width=3)
        draw.line([x - 4, y + 4, x + 4, y - 4], fill=colour, width=3)


def timeline_png(data: dict) -> bytes:
    """The timeline drawn with Pillow: lanes, phase bars, end marks, restarts, axis and legend. What the
    dashboard shows while a run goes, and the run's timeline.png at its end."""
    from PIL import Image, ImageDraw, ImageFont

    now, origin, lanes = data["now"], data["origin"], data["lanes"]
    width, height = timeline_size(data)
    left, right, top, bottom = LEFT_IN * DPI, 0.98 * width, 0.3 * DPI, height - 0.8 * DPI
    span = max(now - origin, 1.0) * 1.02
    lane_h = (bottom - top) / max(len(lanes), 1)
    font, small = ImageFont.load_default(size=12), ImageFont.load_default(size=11)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)

    def x(t: float) -> float:
        return left + (t - origin) / span * (right - left)

    draw.text(((left + right) / 2, top - 8), f"{data['name']}: phases of each task", fill="black", font=font, anchor="md")
    step = _tick_step(span)
    for i in range(int(span / step) + 1):
        tx = left + i * step / span * (right - left)
        draw.line([tx, top, tx, bottom], fill="#d9d9d9")
        draw.text((tx, bottom + 4), f"{i * step:g}", fill="black", font=small, anchor="ma")
    for lane, task in enumerate(lanes):
        middle = top + (lane + 0.5) * lane_h
        draw.text((left - 6, middle), task["label"], fill="black", font=small, anchor="rm")
        for start, end, phase in _segments(task["phases"], task["ended_at"], now):
            draw.rectangle([x(start), middle - 0.35 * lane_h, max(x(end), x(start) + 0.5), middle + 0.35 * lane_h],
                           fill=PHASE_COLOURS[phase])
        for start in _restarts(task["phases"]):
            for y in range(int(top), int(bottom), 4):  # dotted
                draw.line([x(start), y, x(start), y + 1], fill="#444444")
        for start, phase in task["phases"]:
            if phase in END_MARKS:
                _mark(draw, *END_MARKS[phase], x(start), middle)
    draw.rectangle([left, top, right, bottom], outline="black")
    draw.text(((left + right) / 2, bottom + 22), "seconds since launch", fill="black", font=small, anchor="ma")
    seen = {phase for task in lanes for _, phase in task["phases"]}
    shown = [(phase, colour) for phase, colour in PHASE_COLOURS.items() if phase in seen]
    for i, (phase, colour) in enumerate(shown):
        lx = width / 2 + (i - len(shown) / 2) * 95
        draw.rectangle([lx, height - 20, lx + 16, height - 11], fill=colour)
        draw.text((lx + 21, height - 15.5), phase, fill="black", font=small, anchor="lm")
    buffer = io.BytesIO()
    image.save(buffer, format="png")
    return buffer.getvalue()


def save_timeline(data: dict, path) -> None:
    Path(path).write_bytes(timeline_png(data))
