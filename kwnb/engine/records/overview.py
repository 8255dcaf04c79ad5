"""The overview's rows, computed once from a RunSnapshot: the text summary (summary.py) and the dashboard's
table (notebook/overview.py) render the same columns and the same cells, one as text, one as HTML.

One row per task: its label, its GPUs where --gpus placed the tasks, status, phase in words (with the time a
scheduler kept it queued), epoch and step, step rate (recent; once ended, over its training), CPU and memory
(the task's whole process tree, sampled once a second; once ended, its peak), restarts, and the time it spent
in each phase.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...machine.sizes import format_size
from ..tasks.view import TaskView
from .snapshot import RunSnapshot, as_snapshot

COLUMNS = ("task", "status", "phase", "progress", "rate", "CPU", "memory", "restarts", "time in phases")
GPU_COLUMN = "GPU"  # after "task", only where --gpus placed the tasks (a run on this machine)
PHASE_WORDS = {"pending": "pending", "starting": "starting", "joining": "waiting for peers", "serving": "serving",
               "training": "training", "finishing": "finishing",
               "finished": "finished", "failed": "failed", "stopped": "stopped"}
SHOWN_SECONDS = 0.05  # a phase shorter than this shows as "0.0 s" and is left out of "time in phases"


@dataclass(frozen=True)
class OverviewRow:
    """One task's row: its cells as plain text, in the order of `columns`, and the task (for a renderer's marks)."""

    task: TaskView
    cells: tuple[str, ...]


def overview_columns(run: RunSnapshot) -> tuple[str, ...]:
    placed = any(task.gpu for task in run.tasks)
    return (COLUMNS[0], GPU_COLUMN, *COLUMNS[1:]) if placed else COLUMNS


def overview_rows(run: RunSnapshot) -> list[OverviewRow]:
    """Every task's row, in the run's order (the chief first)."""
    run = as_snapshot(run)
    placed = GPU_COLUMN in overview_columns(run)
    return [OverviewRow(task, _cells(task, placed)) for task in run.tasks]


def _cells(task: TaskView, placed: bool) -> tuple[str, ...]:
    _, progress = task.progress
    cpu = "-" if task.cpu_percent is None or not task.alive else f"{task.cpu_percent:.0f} %"
    memory = format_size(task.rss) if task.rss and task.alive else (
        f"peak {format_size(task.peak_rss)}" if task.peak_rss else "-")
    phases = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in task.time_in.items() if seconds >= SHOWN_SECONDS)
    gpu = (task.gpu,) if placed else ()
    return (task.label, *gpu, task.status, phase_text(task), progress or "-", rate_text(task.rate), cpu, memory,
            str(task.restarts), phases or "-")


def rate_text(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1f} steps/s"


def phase_words(task) -> str:
    if task.task_type == "evaluator" and task.phase == "training":
        return "evaluating"  # a sidecar evaluator reads checkpoints; it trains nothing
    return PHASE_WORDS.get(task.phase, task.phase)


def phase_text(task) -> str:
    """The phase in words, with the time a scheduler kept the task queued: "pending 12 s" while it waits,
    "training (12 s pending)" after (--timeout does not count that time)."""
    words = phase_words(task)
    pending = task.time_in.get("pending", 0.0)
    if task.phase == "pending":
        return f"{words} {pending:.0f} s"
    return f"{words} ({pending:.0f} s pending)" if pending >= 1 else words
