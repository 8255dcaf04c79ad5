"""The overview above the dashboard's tabs: one row per task, every task visible at once.

Label, status in words, phase, epoch and step, recent step rate, CPU and memory (the task's whole
process tree, sampled once a second), restarts, and a marker where a diagnosis concerns the task;
under the table, the session's memory against the limit that applies (engine/limits.py).
Plain HTML with the theme's own colours (JupyterLab's --jp-* variables), so it reads in light and
dark themes and at 700 px.
"""
from __future__ import annotations

import html
import time

from ..engine.limits import read_limits
from ..engine.summary import megabytes, rate_text

PHASE_WORDS = {"pending": "queued", "starting": "starting", "joining": "waiting for peers", "training": "training", "finishing": "finishing",
               "finished": "finished", "failed": "failed", "stopped": "stopped"}
COLUMNS = ("task", "status", "phase", "progress", "rate", "CPU", "memory", "restarts")


# Once per dashboard (in its hidden style widget), so that each refresh sends only the table's cells.
# Where the cell is narrower than the table (23 px short at a 700 px window in JupyterLab), the table
# scrolls sideways in its own box (display:block, overflow-x:auto) instead of widening the page; its
# HTML widget's box may shrink below the table's width for that (min-width:0, a flex item's default is auto).
OVERVIEW_CSS = (".kwnb-overview{border-collapse:collapse;font-size:0.85em;margin:2px 0 4px 0;"
                "display:block;max-width:100%;overflow-x:auto}.kwnb-dashboard .widget-html-content{min-width:0}"
                ".kwnb-overview th{text-align:left;font-weight:600;padding:1px 10px 1px 0}"
                ".kwnb-overview td{padding:1px 10px 1px 0;white-space:nowrap}")


def overview_html(run, diagnoses, badge) -> str:
    marked = {d.task for d in diagnoses}
    head = "".join(f"<th>{name}</th>" for name in COLUMNS)
    rows = "".join(_row(task, task.position in marked, badge) for task in run.workers)
    return (f'<table class="kwnb-overview"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
            f'<div class="kwnb-overview-memory">{html.escape(memory_line())}</div>')


_limits = [0.0, None]  # when last read, the Limits: at most every LIMITS_SECONDS (MEM_LIMIT alone sums processes)
LIMITS_SECONDS = 5.0


def memory_line() -> str:
    """'memory: 733 MB of 2.0 GB (cgroup v1 memory.limit_in_bytes)': the session's, where its limit counts it."""
    if _limits[1] is None or time.monotonic() - _limits[0] >= LIMITS_SECONDS:
        _limits[:] = [time.monotonic(), read_limits()]
    limits = _limits[1]
    return f"memory: {megabytes(limits.memory_used)} of {megabytes(limits.memory)} ({limits.memory_source})"


def _row(task, flagged: bool, badge) -> str:
    vitals = task.vitals
    label = f"{task.id}" + (" (chief)" if task.is_chief else "")
    _, progress = task.metrics.progress()
    cpu = "-" if vitals.cpu_percent is None or not task.alive else f"{vitals.cpu_percent:.0f} %"
    memory = megabytes(vitals.rss) if vitals.rss and task.alive else (
        f"peak {megabytes(task.signals.peak_rss)}" if task.signals.peak_rss else "-")
    cells = [("&#9888; " if flagged else "") + html.escape(label), badge(task.status),
             html.escape(PHASE_WORDS.get(task.phase, task.phase)), html.escape(progress or "-"),
             html.escape(rate_text(vitals.rate) if task.alive else "-"), cpu, html.escape(memory),
             str(task.restarts)]
    return "<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"
