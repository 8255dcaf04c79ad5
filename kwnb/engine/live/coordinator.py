"""What a ParameterServerStrategy coordinator in the notebook needs from a run with ps tasks and no chief
task: to wait until every task's TensorFlow server is up (it must not connect first), its TF_CONFIG (the
run's cluster with the `chief` entry kept for it) and its cluster resolver. A mixin of Run (run.py).
"""
from __future__ import annotations

import time

from ..tasks import roles
from .supervisor import POLL_SECONDS


class CoordinatorSide:
    """Run's methods for a coordinator in this process; reads `workers`, `done`, `cluster`, `coordinator`, `name`."""

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until every task's port accepts connections (its TensorFlow server is up).

        For a coordinator in the notebook (ParameterServerStrategy), which must not connect first.
        False if `timeout` passed or the run ended before that.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not all(task.port_open_at for task in roles.training(self.workers)):
            if self.done or (deadline is not None and time.monotonic() > deadline):
                return False
            time.sleep(POLL_SECONDS)
        return True

    def coordinator_tf_config(self) -> dict:
        """TF_CONFIG for a ParameterServerStrategy coordinator in this process (a run with ps tasks and
        no chief task): the run's cluster with its reserved `chief` entry, task chief 0."""
        return roles.coordinator_tf_config(self.cluster, self.coordinator, self.name)

    def cluster_resolver(self):
        """The coordinator's `tf.distribute.cluster_resolver.SimpleClusterResolver` (imports TensorFlow here)."""
        return roles.cluster_resolver(self.coordinator_tf_config())
