"""Inside a sidecar evaluator task: let SidecarEvaluator's own progress lines through to the log.

tf.keras.utils.SidecarEvaluator says which checkpoint it evaluates ("Evaluation starts: Model weights
loaded from latest checkpoint file .../ckpt-3") and what it found ("End of evaluation. Metrics: ...") at
INFO level, which TensorFlow's logger hides by default (its effective level is WARNING). Those lines are
how kwnb places each evaluation on the chief's epoch axis, so an evaluator task lets them, and only them,
through; every other INFO line stays hidden. A script that sets the logger's level itself wins.

Standard library only: the bootstrap runs this before the user's script, and `tensorflow`'s logger is
a standard `logging` logger.
"""
from __future__ import annotations

import json
import logging
import os

# Which checkpoint, what it scored, that it is done, and a checkpoint it could not read (it retries).
# Not its "No checkpoints appear to be found after 30 seconds" hint: training that is still importing
# TensorFlow on a busy machine sets it off, and the overview says "waiting for a checkpoint" anyway.
SIDECAR_MESSAGES = ("Evaluation starts", "End of evaluation", "Last checkpoint evaluated",
                    "SidecarEvaluator encountered")


class _SidecarProgress(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        return str(record.msg).startswith(SIDECAR_MESSAGES)


def task_type(environ=os.environ) -> str:
    try:
        return json.loads(environ.get("TF_CONFIG") or "{}").get("task", {}).get("type", "")
    except (ValueError, AttributeError):
        return ""


def show_evaluator_progress(environ=os.environ) -> bool:
    """In an evaluator task, lower TensorFlow's logger to INFO for SidecarEvaluator's lines only."""
    if task_type(environ) != "evaluator":
        return False
    logger = logging.getLogger("tensorflow")
    if logger.level != logging.NOTSET:  # the level was chosen by someone: leave it
        return False
    logger.setLevel(logging.INFO)
    logger.addFilter(_SidecarProgress())
    return True
