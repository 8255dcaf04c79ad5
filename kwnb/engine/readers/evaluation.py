"""A sidecar evaluator's curves: one row per checkpoint it evaluated, on the chief's epoch axis.

tf.keras.utils.SidecarEvaluator loads the newest checkpoint, runs `model.evaluate(verbose=2)` (one
line `5/5 - 0s - loss: 0.31 - accuracy: 0.91 - ...` per evaluation) and waits for the next checkpoint,
skipping any written meanwhile. kwnb/task/sidecar.py lets its "Evaluation starts: ... checkpoint file
.../ckpt-3" line through, which says which one: with `ModelCheckpoint(".../ckpt-{epoch}")`, as the
SidecarEvaluator documentation asks, checkpoint k is saved at the end of epoch k (1-based), so its row is
epoch k-1 (0-based, as Keras's History numbers them) and is drawn where the chief's epoch k-1 is. With
a CheckpointManager, k counts saves, which is the epoch too when the loop saves once an epoch. Where no
checkpoint line comes (another logger set-up), evaluations are numbered in order.
"""
from __future__ import annotations

import re

from .metrics import MetricsParser, parse_metrics

_CHECKPOINT = re.compile(r"Evaluation starts: .*?checkpoint file (?P<path>\S*?)-(?P<number>\d+)\s*$")
# An evaluation's last progress line: verbose=2's "5/5 - 0s - loss: 0.3123 - accuracy: 0.9100 - 41ms/epoch",
# or verbose=1's "5/5 [==============================] - 0s 8ms/step - loss: 0.3123 - accuracy: 0.9100".
_EVALUATED = re.compile(r"\s*(?P<step>\d+)/(?P<steps>\d+) (?:\[[^\]]*\] )?- (?P<rest>.*)")


class EvaluationParser(MetricsParser):
    """Epoch rows of an evaluator task: its metrics on each checkpoint, by the checkpoint's epoch."""

    def __init__(self):
        super().__init__()
        self.checkpoint: int | None = None  # the number of the checkpoint being evaluated (ckpt-<k>)
        self.evaluated = 0  # evaluations finished

    def _scan(self, text: str) -> None:
        for line in text.split("\n")[:-1]:  # whole lines only: an evaluation is done when its line ends
            line = line.replace("\b", "\r").rpartition("\r")[2]  # what a terminal shows of a redrawn bar
            checkpoint = _CHECKPOINT.search(line)
            if checkpoint:
                self.checkpoint = int(checkpoint["number"])
                continue
            evaluated = _EVALUATED.fullmatch(line)
            metrics = parse_metrics(evaluated["rest"]) if evaluated and evaluated["step"] == evaluated["steps"] else {}
            if metrics:
                epoch = self.checkpoint - 1 if self.checkpoint is not None else self.evaluated
                self.evaluated += 1
                self.epoch = epoch
                self._add_epoch(epoch, metrics)

    def progress(self) -> tuple[float | None, str]:
        if not self.evaluated and self.checkpoint is None:
            return None, "waiting for a checkpoint"
        last = f"checkpoint {self.checkpoint}" if self.checkpoint is not None else f"evaluation {self.evaluated}"
        return None, f"{last}, {self.evaluated} evaluated"
