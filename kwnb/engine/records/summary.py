"""The plain-text account of a run: what the terminal prints and what a headless notebook shows.

Rendered from a RunSnapshot (engine/records/snapshot.py), live or read from a past run's folder; a Run or a
past run given instead is asked for its snapshot first.
"""
from __future__ import annotations

from typing import Collection

from ..diagnoses.recovery import faults
from ..tasks.status import Status
from .overview import overview_columns, overview_rows, rate_text  # noqa: F401 (rate_text: the summary's name too)
from .snapshot import RunSnapshot, as_snapshot


def format_metrics(row: dict, limit: int = 4) -> str:
    shown = [(k, v) for k, v in row.items() if k not in ("epoch", "step", "time")][:limit]
    return "  ".join(f"{k} {v:.4g}" for k, v in shown)


def format_summary(run: RunSnapshot, told: Collection[str] = ()) -> str:
    """`told`: notes the reader was already shown (a notebook prints them as the run starts): not repeated."""
    run = as_snapshot(run)
    codes = run.exit_codes
    tasks = len(run.workers)
    # A past run whose folder never got its result (an older kwnb, a kernel gone first) has no duration.
    after = "" if run.past and run.started_at is None else f" after {run.elapsed:.1f} s"
    head = f"kwnb run {run.name!r}: {run.status}{after}, {tasks} task{'s' * (tasks != 1)}"
    if run.restarts:  # the failure policy's, of the whole cluster
        head += f", {run.restarts} restart{'s' * (run.restarts != 1)}"
    if run.user_restarts:  # tasks the user restarted (%kw_restart)
        head += f", {run.user_restarts} task restart{'s' * (run.user_restarts != 1)} by the user"
    lines = [head + (f" ({run.reason})" if run.reason else "")]
    lines.append("exit codes: " + ", ".join(("unknown" if run.past else "running") if c is None else str(c) for c in codes))
    warm = sum(task.warm for task in run.workers)
    if warm:
        lines.append(f"started warm: {warm} of {tasks} tasks in interpreters that had imported TensorFlow already")
    for worker in run.workers:
        code = "" if worker.returncode is None else f"exit {worker.returncode}"
        line = f"  {worker.label}: {worker.status} {code}".rstrip()
        history = worker.epochs
        if history:
            unit = "evaluations" if worker.task_type == "evaluator" else "epochs"  # one per checkpoint it read
            line += f"; {len(history)} {unit}, last: {format_metrics(history[-1])}"
        lines.append(line)
        if worker.status == Status.FAILED:
            lines.extend("    | " + text for text in worker.tail[-5:])
    lines.extend(overview_lines(run))
    recovered = [d for d in run.diagnoses if d.recovered]
    for heading, listed in (("diagnoses", faults(run.diagnoses)), ("recovered", recovered)):
        if listed:  # what the run recovered from is history, after what is wrong (engine/diagnoses/recovery.py)
            lines.append(f"{heading}:")
            lines.extend(f"  - {d.kind}: {d.message}" for d in listed)
    lines.append(f"logs: {run.dir}")
    if run.curves_path:
        lines.append(f"curves: {run.curves_path}")
    if run.timeline_path:
        lines.append(f"timeline: {run.timeline_path}")
    lines.extend(f"note: {note}" for note in run.notes if note not in told)
    lines.extend(f"not recorded: {what}" for what in run.missing)
    return "\n".join(lines)


def overview_lines(run: RunSnapshot) -> list[str]:
    """The overview (engine/records/overview.py) as a small text table: the dashboard's columns, its cells."""
    run = as_snapshot(run)
    rows = [overview_columns(run), *(row.cells for row in overview_rows(run))]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]  # the last is left ragged
    return ["overview:"] + ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1]
                            for row in rows]
