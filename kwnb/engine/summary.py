"""The plain-text account of a run: what the terminal prints and what a headless notebook shows."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .status import Status

if TYPE_CHECKING:
    from .run import Run


def format_metrics(row: dict, limit: int = 4) -> str:
    shown = [(k, v) for k, v in row.items() if k not in ("epoch", "step", "time")][:limit]
    return "  ".join(f"{k} {v:.4g}" for k, v in shown)


def format_summary(run: "Run") -> str:
    codes = run.exit_codes
    tasks = len(run.workers)
    head = f"kwnb run {run.name!r}: {run.status} after {run.elapsed:.1f} s, {tasks} task{'s' * (tasks != 1)}"
    if run.restarts:  # the failure policy's, of the whole cluster
        head += f", {run.restarts} restart{'s' * (run.restarts != 1)}"
    if run.user_restarts:  # tasks the user restarted (%kw_restart)
        head += f", {run.user_restarts} task restart{'s' * (run.user_restarts != 1)} by the user"
    lines = [head + (f" ({run.reason})" if run.reason else "")]
    lines.append("exit codes: " + ", ".join("running" if c is None else str(c) for c in codes))
    warm = sum(task.warm for task in run.workers)
    if warm:
        lines.append(f"started warm: {warm} of {tasks} tasks in interpreters that had imported TensorFlow already")
    for worker in run.workers:
        code = "" if worker.returncode is None else f"exit {worker.returncode}"
        line = f"  {worker.label}: {worker.status} {code}".rstrip()
        history = worker.metrics.history()
        if history:
            unit = "evaluations" if worker.task_type == "evaluator" else "epochs"  # one per checkpoint it read
            line += f"; {len(history)} {unit}, last: {format_metrics(history[-1])}"
        lines.append(line)
        if worker.status == Status.FAILED:
            lines.extend("    | " + text for text in worker.screen.tail(5))
    lines.extend(overview_lines(run))
    if run.diagnoses:
        lines.append("diagnoses:")
        lines.extend(f"  - {d.kind}: {d.message}" for d in run.diagnoses)
    lines.append(f"logs: {run.dir}")
    if run.curves_path:
        lines.append(f"curves: {run.curves_path}")
    if run.folder.timeline.is_file():
        lines.append(f"timeline: {run.folder.timeline}")
    lines.extend(f"note: {note}" for note in run.notes)
    return "\n".join(lines)


def megabytes(size: int) -> str:
    return f"{size / 2**30:.1f} GB" if size >= 2**30 else f"{size / 2**20:.0f} MB"


def rate_text(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1f} steps/s"


def overview_lines(run: "Run") -> list[str]:
    """The overview as a small text table: rate, peak memory and the time each task spent in each phase."""
    rows = [("task", "phase", "rate", "peak memory", "time in phases")]
    for task in run.workers:
        label = task.label
        spent = task.vitals.time_in(until=task.ended_at)
        phases = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in spent.items() if seconds >= 0.05)
        peak = task.signals.peak_rss
        rate = task.vitals.rate if task.alive else task.vitals.mean_rate(task)
        rows.append((label, task.phase, rate_text(rate),
                     megabytes(peak) if peak else "-", phases or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return ["overview:"] + ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[4]
                            for row in rows]
