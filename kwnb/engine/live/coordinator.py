"""What a ParameterServerStrategy coordinator in the notebook needs from a run with ps tasks and no chief
task: to wait until every task's TensorFlow server is up (it must not connect first), its TF_CONFIG (the
run's cluster with the `chief` entry kept for it) and its cluster resolver. Read from the run's engine side
(run_engine.py) for the learner's Run (run.py: `wait_ready`, `coordinator_tf_config`, `cluster_resolver`).
"""
from __future__ import annotations

import time

from ..tasks import roles
from .run_engine import RunEngine
from .supervisor import POLL_SECONDS


def wait_ready(engine: RunEngine, timeout: float | None = None) -> bool:
    """Wait until every training task's port accepts connections; False if `timeout` passed or the run ended first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not all(task.port_open_at for task in roles.training(engine.workers)):
        if engine.done or (deadline is not None and time.monotonic() > deadline):
            return False
        time.sleep(POLL_SECONDS)
    return True


def coordinator_tf_config(engine: RunEngine) -> dict:
    """The run's cluster with its reserved `chief` entry, task chief 0."""
    with engine.state_lock:
        cluster = engine.cluster
    return roles.coordinator_tf_config(cluster, engine.coordinator, engine.name)
