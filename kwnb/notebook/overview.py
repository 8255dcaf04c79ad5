"""The overview above the dashboard's tabs: one row per task, every task visible at once.

Label, status in words, phase, epoch and step, recent step rate, CPU and memory (the task's whole
process tree, sampled once a second), restarts, and a marker where a diagnosis concerns the task.
Plain HTML with the theme's own colours (JupyterLab's --jp-* variables), so it reads in light and
dark themes and at 700 px.
"""
from __future__ import annotations

import html

from ..engine.summary import megabytes, rate_text

PHASE_WORDS = {"pending": "pending", "starting": "starting", "joining": "waiting for peers", "training": "training", "finishing": "finishing",
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
    return f'<table class="kwnb-overview"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'



def phase_words(task) -> str:
    if task.task_type == "evaluator" and task.phase == "training":
        return "evaluating"  # a sidecar evaluator reads checkpoints; it trains nothing
    return PHASE_WORDS.get(task.phase, task.phase)


def phase_text(task) -> str:
    """The phase in words, with the time a scheduler kept the task queued: "pending 12 s" while it waits,
    "training (12 s pending)" after (--timeout does not count that time)."""
    words = phase_words(task)
    pending = task.vitals.time_in(until=task.ended_at).get("pending", 0.0)
    if task.phase == "pending":
        return f"{words} {pending:.0f} s"
    return f"{words} ({pending:.0f} s pending)" if pending >= 1 else words


def _row(task, flagged: bool, badge) -> str:
    vitals = task.vitals
    label = task.label
    _, progress = task.metrics.progress()
    cpu = "-" if vitals.cpu_percent is None or not task.alive else f"{vitals.cpu_percent:.0f} %"
    memory = megabytes(vitals.rss) if vitals.rss and task.alive else (
        f"peak {megabytes(task.signals.peak_rss)}" if task.signals.peak_rss else "-")
    cells = [("&#9888; " if flagged else "") + html.escape(label), badge(task.status),
             html.escape(phase_text(task)), html.escape(progress or "-"),
             html.escape(rate_text(vitals.rate) if task.alive else "-"), cpu, html.escape(memory),
             str(task.restarts)]
    return "<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"
