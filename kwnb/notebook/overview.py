"""The overview above the dashboard's tabs: one row per task, every task visible at once.

The rows and their cells are engine/records/overview.py's, the same the text summary shows; here they are
HTML, the status as a coloured badge and a marker where a diagnosis concerns the task; under the table, the
session's memory against the limit that applies (machine/limits.py).
Plain HTML with the theme's own colours (JupyterLab's --jp-* variables), so it reads in light and
dark themes and at 700 px.
"""
from __future__ import annotations

import html
import time

from ..machine.limits import read_limits
from ..engine.diagnoses.recovery import faults
from ..engine.records.overview import overview_columns, overview_rows
from ..machine.sizes import format_size

MANY_TASKS = 12  # more rows than this: the tasks that matter first, and the table scrolls (~14 rows high)
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
                ".kwnb-overview td{padding:1px 10px 1px 0;white-space:nowrap}"
                ".kwnb-overview-tall{max-height:22em;overflow-y:auto}"
                ".kwnb-overview-tall th{position:sticky;top:0;background:var(--jp-layout-color1,#fff)}")


def badge(status: str) -> str:
    colour = STATUS_COLOURS.get(status, "#616161")
    return (f'<span style="background:{colour};color:#fff;padding:1px 7px;border-radius:3px;'
            f'font-weight:600;font-size:0.85em;letter-spacing:0.04em">{status.upper()}</span>')


def diagnoses_html(diagnoses) -> str:
    """The banner above the tabs (and on a task's tab): one line per diagnosis, in words. What the run recovered
    from follows in the theme's own colours, marked as recovered: an ok run's account never opens in red."""
    wrong, recovered = faults(diagnoses), [d for d in diagnoses if d.recovered]
    # A translucent red behind the theme's own text colour: readable on light and dark themes alike.
    return (_banner(wrong, "&#9888;", "border-left:4px solid #c62828;background:rgba(198,40,40,0.10)")
            + _banner(recovered, "&#8635;", "border-left:4px solid #2e7d32;opacity:0.85"))


def _banner(diagnoses, mark: str, style: str) -> str:
    if not diagnoses:
        return ""
    rows = "".join(f"<div>{mark} <b>{html.escape(d.kind.replace('_', ' '))}</b>: {html.escape(d.message)}</div>"
                   for d in diagnoses)
    return f'<div style="{style};padding:3px 8px;margin:2px 0;font-size:0.9em;line-height:1.35">{rows}</div>'


def overview_html(run, diagnoses, badge=badge, session_memory: bool = True) -> str:
    """`run` is a RunSnapshot (engine/records/snapshot.py): a live run's or a past run's. `session_memory`: the line of
    the session's memory under the table (the published account of an ended run leaves it out)."""
    marked = {d.task for d in faults(diagnoses)}
    columns = overview_columns(run)
    head = "".join(f"<th>{html.escape(name)}</th>" for name in columns)
    many = len(run.workers) > MANY_TASKS  # a few tasks keep their order: all are in view anyway
    rows = overview_rows(run)
    if many:
        order = {task.position: place for place, task in enumerate(by_importance(run.workers, marked))}
        rows.sort(key=lambda row: order[row.task.position])
    status = columns.index("status")
    rows = "".join(_row(row.cells, row.task.position in marked, badge(row.task.status), status) for row in rows)
    # The session's memory against its limit (not under a past run: that would be today's, not the run's).
    memory = "" if run.past or not session_memory else f'<div class="kwnb-overview-memory">{html.escape(memory_line())}</div>'
    body = f'<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>' + memory
    if not many:
        return '<table class="kwnb-overview">' + body
    # Past MANY_TASKS rows the table scrolls in a box of its own, its head kept in view, under a count.
    return (f'<div style="font-size:0.85em">{counts(run.workers, marked)}</div>'
            '<table class="kwnb-overview kwnb-overview-tall">' + body)


def counts(tasks, marked: set) -> str:
    """'64 tasks: 61 running, 2 finished, 1 failed; 1 with a diagnosis (first below)'."""
    statuses: dict[str, int] = {}
    for task in tasks:
        statuses[task.status] = statuses.get(task.status, 0) + 1
    text = f"{len(tasks)} tasks: " + ", ".join(f"{n} {status}" for status, n in statuses.items())
    return html.escape(text + (f"; {len(marked)} with a diagnosis (first below)" if marked else ""))


def by_importance(tasks, marked: set) -> list:
    """The tasks that need a look first: those a diagnosis names, then failed ones, then the rest in order
    (the chief first). With 64 tasks the one that matters is at the top, not somewhere in a long table."""
    return sorted(tasks, key=lambda task: (task.position not in marked, task.status != "failed", task.position))


_limits = [0.0, None]  # when last read, the Limits: at most every LIMITS_SECONDS (MEM_LIMIT alone sums processes)
LIMITS_SECONDS = 5.0


def memory_line() -> str:
    """'memory: 699 MiB of 2.0 GiB (cgroup v1 memory.limit_in_bytes)': the session's, where its limit counts it."""
    if _limits[1] is None or time.monotonic() - _limits[0] >= LIMITS_SECONDS:
        _limits[:] = [time.monotonic(), read_limits()]
    limits = _limits[1]
    return f"memory: {format_size(limits.memory_used)} of {format_size(limits.memory)} ({limits.memory_source})"


def _row(cells: tuple, flagged: bool, badge: str, status: int) -> str:
    shown = [html.escape(cell) for cell in cells]
    shown[0] = ("&#9888; " if flagged else "") + shown[0]
    shown[status] = badge
    return "<tr>" + "".join(f"<td>{cell}</td>" for cell in shown) + "</tr>"
