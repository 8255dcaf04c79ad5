"""The overview above the dashboard's tabs: one row per task, every task visible at once.

Label, status in words, phase, epoch and step, recent step rate, CPU and memory (the task's whole
process tree, sampled once a second), restarts, and a marker where a diagnosis concerns the task.
Plain HTML with the theme's own colours (JupyterLab's --jp-* variables), so it reads in light and
dark themes and at 700 px.
"""
from __future__ import annotations

import html

from ..engine.summary import megabytes, rate_text

PHASE_WORDS = {"pending": "queued", "starting": "starting", "joining": "waiting for peers", "training": "training", "finishing": "finishing",
               "finished": "finished", "failed": "failed", "stopped": "stopped"}
COLUMNS = ("task", "status", "phase", "progress", "rate", "CPU", "memory", "restarts")
# Readable on JupyterLab's light and dark themes alike; the word is always shown too.
STATUS_COLOURS = {"pending": "#6a4c93", "starting": "#8a6d00", "running": "#1769aa", "finished": "#2e7d32",
                  "failed": "#c62828", "stopped": "#616161"}


# Once per dashboard (in its hidden style widget), so that each refresh sends only the table's cells.
# Where the cell is narrower than the table (23 px short at a 700 px window in JupyterLab), the table
# scrolls sideways in its own box (display:block, overflow-x:auto) instead of widening the page; its
# HTML widget's box may shrink below the table's width for that (min-width:0, a flex item's default is auto).
OVERVIEW_CSS = (".kwnb-overview{border-collapse:collapse;font-size:0.85em;margin:2px 0 4px 0;"
                "display:block;max-width:100%;overflow-x:auto}.kwnb-dashboard .widget-html-content{min-width:0}"
                ".kwnb-overview th{text-align:left;font-weight:600;padding:1px 10px 1px 0}"
                ".kwnb-overview td{padding:1px 10px 1px 0;white-space:nowrap}")


def badge(status: str) -> str:
    colour = STATUS_COLOURS.get(status, "#616161")
    return (f'<span style="background:{colour};color:#fff;padding:1px 7px;border-radius:3px;'
            f'font-weight:600;font-size:0.85em;letter-spacing:0.04em">{status.upper()}</span>')


def diagnoses_html(diagnoses) -> str:
    """The banner above the tabs (and on a task's tab): one line per diagnosis, in words."""
    if not diagnoses:
        return ""
    rows = "".join(f"<div>&#9888; <b>{html.escape(d.kind.replace('_', ' '))}</b>: {html.escape(d.message)}</div>"
                   for d in diagnoses)
    # A translucent red behind the theme's own text colour: readable on light and dark themes alike.
    return (f'<div style="border-left:4px solid #c62828;background:rgba(198,40,40,0.10);padding:3px 8px;'
            f'margin:2px 0;font-size:0.9em;line-height:1.35">{rows}</div>')


def overview_html(run, diagnoses, badge=badge) -> str:
    """`run` is a RunSnapshot (engine/snapshot.py): a live run's or a past run's."""
    marked = {d.task for d in diagnoses}
    head = "".join(f"<th>{name}</th>" for name in COLUMNS)
    rows = "".join(_row(task, task.position in marked, badge) for task in run.workers)
    return f'<table class="kwnb-overview"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'



def _row(task, flagged: bool, badge) -> str:
    _, progress = task.progress
    cpu = "-" if task.cpu_percent is None or not task.alive else f"{task.cpu_percent:.0f} %"
    memory = megabytes(task.rss) if task.rss and task.alive else (
        f"peak {megabytes(task.peak_rss)}" if task.peak_rss else "-")
    cells = [("&#9888; " if flagged else "") + html.escape(task.label), badge(task.status),
             html.escape(PHASE_WORDS.get(task.phase, task.phase)), html.escape(progress or "-"),
             html.escape(rate_text(task.rate) if task.alive else "-"), cpu, html.escape(memory),
             str(task.restarts)]
    return "<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"
