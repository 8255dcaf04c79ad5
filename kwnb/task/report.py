"""`kwnb.report()`: metrics a worker states explicitly, for training code whose output kwnb cannot parse.

Runs inside worker processes, so it imports nothing heavy. Outside a kwnb run it does nothing,
so the same script still runs by hand.
"""
from __future__ import annotations

import json
import os
import time

from .runfolder import POSITION_ENV, RUN_DIR_ENV, RunFolder


def report(step: int | None = None, epoch: int | None = None, **metrics: float) -> None:
    """Record metrics for this worker's curves, e.g. `kwnb.report(epoch=3, loss=0.2, accuracy=0.9)`."""
    run_dir, position = os.environ.get(RUN_DIR_ENV), os.environ.get(POSITION_ENV)
    if not run_dir or position is None:
        return
    row = {"time": time.time(), "epoch": _whole(epoch), "step": _whole(step)}
    row.update({key: _plain(value) for key, value in metrics.items()})
    with open(RunFolder(run_dir).metrics(int(position)), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")


def _whole(value):
    """Steps and epochs from numpy or TensorFlow (`optimizer.iterations.numpy()`) as Python ints."""
    if value is None:
        return None
    return int(value.numpy() if hasattr(value, "numpy") else value)


def _plain(value):
    """Numbers from numpy or TensorFlow tensors as Python floats."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    return float(value)
