"""One diagnosis (a finding in one sentence) and the words for how a task ended, shared by the modules
that make diagnoses (engine/diagnoses/diagnose.py, engine/diagnoses/training_faults.py)."""
from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..tasks.task import Task


@dataclass
class Diagnosis:
    """One finding: what happened, to which task (its position; None for the whole run), what to do."""

    kind: str
    task: int | None
    message: str
    since: float = 0.0
    evidence: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message


def signal_name(number: int) -> str:
    return signal.Signals(number).name if number in signal.Signals._value2member_map_ else f"signal {number}"


def ended(task: "Task") -> str:
    """How a task ended, in words: 'was killed by SIGKILL', 'exited normally', 'crashed (exit code 1)'."""
    code = task.returncode
    if code is not None and code < 0:
        return f"was killed by {signal_name(-code)}"
    return "exited normally" if code == 0 else f"crashed (exit code {code})"


def where(task: "Task") -> str:
    """The last epoch and step kwnb read from the task's output ('epoch 2/5, step 30/100'), or ''."""
    metrics = task.metrics
    label = metrics.progress()[1]
    if not label and metrics.step:  # a custom loop that prints "step 26/60" without epochs
        label = f"step {metrics.step}" + (f"/{metrics.steps_per_epoch}" if metrics.steps_per_epoch else "")
    return label
