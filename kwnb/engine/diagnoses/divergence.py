"""`diverging`: a loss that stays finite but grows by orders of magnitude (`nan_loss` says when it stops being a
number). Read from the chief's curves (every replica shows the same loss): its epoch rows, else the running
values of its progress bar, where the spike of a first epoch shows."""
from __future__ import annotations

import math

from ..tasks.view import TaskView
from .diagnosis import Diagnosis, Look

# A rise this many times over the lowest loss so far. A learning rate of 1e3 on the test fit went from 0.69 to
# ~1e9 in the first epoch (issue 29's MNIST: 2.29 -> 5e10); a clean fit's epoch loss moved by less than 2 %
# between epochs and its running step values within 2x of their lowest (tests/data/tf-2.21/clean-*: the first
# steps' running mean starts noisy). 100x leaves room for a noisy start and no doubt about a diverged one.
RISE = 100.0
NOT_RECOVERED = 10.0  # still this many times over the lowest at the end: the training never came back
CAUSE = "training has diverged: the learning rate is too high (or the inputs are unscaled)"
FIX = ("lower the learning rate (10x at a time), scale the inputs (divide pixels by 255), or clip gradients "
       "(clipnorm=1.0)")


def diverging(look: Look) -> Diagnosis | None:
    tasks, current = look.tasks, look.current
    if any(d.kind in ("nan_loss", "diverging") for d in current):  # said once; NaN says it louder
        return next((d for d in current if d.kind == "diverging"), None)
    task = next((t for t in sorted(tasks, key=lambda t: not t.is_chief) if t.training and (t.epochs or t.steps)),
                None)
    if task is None:
        return None
    return _spike(task, list(task.epochs), "epoch") or _spike(task, list(task.steps), "step")


def _spike(task: TaskView, rows: list[dict], unit: str) -> Diagnosis | None:
    values = [(row, row["loss"]) for row in rows if isinstance(row.get("loss"), (int, float))]
    best_row, best = None, math.inf
    for row, value in values:
        if not math.isfinite(value):
            return None  # nan_loss says it
        if value > RISE * best > 0:
            return _told(task, unit, (best_row, best), (row, value), values[-1])
        if value < best:
            best_row, best = row, value
    return None


def _told(task: TaskView, unit: str, low: tuple, high: tuple, last: tuple) -> Diagnosis:
    (low_row, low_value), (high_row, high_value), (last_row, last_value) = low, high, last
    where = _at(low_row, unit, task.steps_per_epoch), _at(high_row, unit, task.steps_per_epoch)
    end = ""
    if last_row is not high_row:
        stuck = last_value > NOT_RECOVERED * low_value
        accuracy = next((f", {k} {v:.3g}" for k, v in last_row.items() if "acc" in k and not k.startswith("val_")), "")
        end = f"; its last value was {last_value:.3g}{accuracy}" + (": it has not recovered" if stuck else "")
    return Diagnosis("diverging", task.position,
                     f"{task.id}'s loss grew from {low_value:.3g} ({where[0]}) to {high_value:.3g} ({where[1]}), "
                     f"{high_value / low_value:.0e} times as much{end}: {CAUSE}. {FIX[0].upper()}{FIX[1:]}",
                     evidence=[str(low_row), str(high_row)] + ([str(last_row)] if last_row is not high_row else []))


def _at(row: dict, unit: str, per_epoch: int | None) -> str:
    """'epoch 2', or 'epoch 2, step 3/10' for a step row (whose step counts from the first epoch's)."""
    epoch = row.get("epoch")
    at = f"epoch {epoch + 1}" if epoch is not None else ""
    step = row.get("step")
    if unit != "step" or step is None:
        return at
    if per_epoch and epoch is not None:
        return f"{at}, step {step - epoch * per_epoch}/{per_epoch}"
    return f"{at}, step {step}" if at else f"step {step}"
