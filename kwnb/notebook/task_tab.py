"""What one task's tab shows: its label, its header line, its log tail with TensorFlow's runtime lines folded
away, and the toggle that says how many are folded. Values in, HTML out: the dashboard draws them."""
from __future__ import annotations

import html

from ..engine.records.snapshot import LOG_LINES
from .overview import badge, diagnoses_html


def worker_label(worker) -> str:
    return f"{worker.label}: {worker.status}"


def log_html(worker, show_runtime: bool = False) -> str:
    """A task's log tail (a TaskView of a RunSnapshot, or anything that has its snapshot's fields), its
    TensorFlow runtime lines (as the task's reader classified them, engine/readers/output.py) left out unless shown."""
    shown = list(worker.tail)[-LOG_LINES:]
    hidden = worker.total_lines - len(shown)
    folded = {place - (len(worker.tail) - len(shown)) for place in worker.tail_runtime}
    lines = shown if show_runtime else [line for place, line in enumerate(shown) if place not in folded]
    note = (f"{hidden} earlier line{'s' * (hidden != 1)} not shown; " if hidden > 0 else "") + f"full log: {worker.log_path}"
    body = html.escape("\n".join(lines)) or "(no output yet)"
    # column-reverse keeps the box scrolled to its newest line, like a terminal, on every redraw.
    return (f'<div style="font-size:0.8em;opacity:0.75">{html.escape(note)}</div>'
            f'<div style="max-height:22em;overflow:auto;display:flex;flex-direction:column-reverse">'
            f'<pre style="flex:none;margin:2px 0;font-size:0.8em;line-height:1.25;'
            f'white-space:pre-wrap;word-break:break-all">{body}</pre></div>')


def fold_label(worker, shown: bool) -> str:
    count = worker.runtime_lines
    words = f"{count} TensorFlow runtime message{'s' * (count != 1)}"
    return f"{words} shown - hide" if shown else f"{words} hidden - show"


def header_html(worker, diagnoses=()) -> str:
    parts = [badge(worker.status), f"<b>{html.escape(worker_label(worker).split(':')[0])}</b>",
             html.escape(worker.where), f"{worker.elapsed:.1f} s"]
    if worker.returncode is not None:
        parts.append(f"exit code <b>{worker.returncode}</b>")
    if worker.restarts:
        parts.append(f"restarts {worker.restarts}")
    if worker.address:
        parts.append(f"<code>{html.escape(worker.address)}</code>")
    return " &nbsp;·&nbsp; ".join(parts) + diagnoses_html([d for d in diagnoses if d.task == worker.position])
