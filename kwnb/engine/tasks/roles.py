"""The roles of a run's tasks beyond "worker": a dedicated chief task, a sidecar evaluator, and the
calling process as the coordinator of a parameter-server cluster.

- A `chief` task (`--chief`) is the chief: the run's curves are its curves, and, as TensorFlow and
  Kubeflow's TFJob decide a job, its exit decides the run's status (a worker that fails after the
  chief has finished does not fail the run). Training tasks still running CHIEF_GRACE_SECONDS after
  the chief finished are stopped (the failure policy decides it: engine/live/policy.py), as a TFJob's
  CleanPodPolicy removes them. Without a chief task every worker's exit counts, worker 0's included.
- An `evaluator` task (`--evaluator`) is a sidecar: not in the cluster (tf_config.py), it reads the
  checkpoints the training writes. Its failure is not a failure of training, and once every training
  task has ended it is given EVALUATOR_GRACE_SECONDS to evaluate the last checkpoint, then stopped.
- The coordinator: with ps tasks and no chief task, the calling process (a notebook) coordinates
  ParameterServerStrategy; the cluster reserves it a `chief` entry on a free port (cluster.coordinator_of).
"""
from __future__ import annotations

import time

from ...task.tf_config import OUTSIDE_CLUSTER, TaskId
from ..readers.evaluation import EvaluationParser
from .status import Status

# Evaluating one checkpoint of a small model takes 2-10 s here; reading it, a second more. A script that
# passes max_evaluations=EPOCHS to SidecarEvaluator ends by itself sooner.
EVALUATOR_GRACE_SECONDS = 30.0
# Under MultiWorkerMirroredStrategy a worker ends within 1 s of the chief (-0.4 to +0.7 s over 4 chief jobs of
# tf-keras fit, 1-2 workers, at load 2-4 on 2 cores): 10 s leaves room for a loaded machine, and is short
# beside what it ends, a worker hung in a collective or shutdown, or serving forever (ps), until --timeout.
CHIEF_GRACE_SECONDS = 10.0


def is_sidecar(task) -> bool:
    return task.task_type in OUTSIDE_CLUSTER


def training(tasks: list) -> list:
    """The tasks whose ends end the run (all but sidecars)."""
    return [task for task in tasks if not is_sidecar(task)]


def chief_position(task_ids: list[TaskId]) -> int | None:
    """Which of a run's tasks is the chief, for a live run and a reopened one alike: a chief task if there
    is one, else worker 0; None under ParameterServerStrategy without a chief task, whose chief is the
    coordinator, the calling process (a notebook)."""
    types = {task_id.type for task_id in task_ids}
    if "ps" in types and "chief" not in types:
        return None
    return task_ids.index(TaskId("chief", 0) if "chief" in types else TaskId("worker", 0))


def serves(task_id: TaskId, task_ids: list[TaskId]) -> bool:
    """Under ParameterServerStrategy (a run with ps tasks) the workers and the ps only serve: the coordinator
    (a chief task, or the calling process) runs training on them. They never log a join."""
    return task_id.type in ("worker", "ps") and any(other.type == "ps" for other in task_ids)


def prepare(tasks: list) -> None:
    """Mark the chief and the serving tasks, and give an evaluator its parser, once the run has made its tasks."""
    ids = [task.id for task in tasks]
    chief = chief_position(ids)
    for position, task in enumerate(tasks):
        task.is_chief = position == chief
        task.serves = serves(task.id, ids)
        if task.task_type == "evaluator":
            task.metrics = EvaluationParser()


def status(tasks: list, timed_out: bool, ended: bool = True, failed: tuple[int, ...] = ()) -> Status:
    """A run's status, decided here alone: while it goes, pending or starting until a task runs, then running;
    once it `ended`, from its training tasks (an evaluator's does not count), those at positions `failed` counted
    as failed whatever their exit (the failure policy ended the run for them: engine/live/policy.py)."""
    if not ended:
        statuses = [task.status for task in tasks]
        if all(s in (Status.STARTING, Status.PENDING) for s in statuses):
            return Status.PENDING if Status.PENDING in statuses else Status.STARTING
        return Status.RUNNING
    statuses = [Status.FAILED if failed and task.position in failed else task.status for task in training(tasks)]
    if timed_out:
        return Status.FAILED
    if tasks[0].task_type == "chief" and tasks[0].status == Status.FINISHED:
        return Status.FINISHED  # the chief decides, as TensorFlow's (and a TFJob's) success policy does
    if Status.FAILED in statuses:
        return Status.FAILED
    if Status.STOPPED in statuses:
        return Status.STOPPED
    return Status.FINISHED


class Sidecars:
    """When to stop the sidecars of a run whose training tasks have all ended."""

    def __init__(self, tasks: list, grace: float = EVALUATOR_GRACE_SECONDS):
        self.tasks, self.grace = tasks, grace
        self.training_ended_at: float | None = None

    def due(self, now: float | None = None) -> list:
        """The sidecars still running `grace` seconds after the last training task ended."""
        now = time.time() if now is None else now
        if any(task.returncode is None for task in training(self.tasks)):
            self.training_ended_at = None  # still training (or restarted)
            return []
        alive = [task for task in self.tasks if is_sidecar(task) and task.returncode is None]
        if not alive:
            return []
        self.training_ended_at = self.training_ended_at or now
        return alive if now - self.training_ended_at >= self.grace else []

    def stop(self, due: list, stop_task) -> str:
        """Stop the due sidecars with the run's `stop_task(task)`; the note that says so."""
        for task in due:
            stop_task(task)
        names = ", ".join(str(task.id) for task in due)
        return f"{names} stopped {self.grace:g} s after training ended (its grace period to evaluate the last checkpoint)"


def coordinator_tf_config(cluster: dict | None, coordinator: TaskId | None, run_name: str) -> dict:
    """TF_CONFIG for the coordinator in the calling process: the run's cluster, task chief 0."""
    from ...errors import NotPossible

    if coordinator is None:
        raise NotPossible(f"run {run_name!r} has no coordinator entry: one is reserved for runs with ps tasks and no "
                          f"chief task (ParameterServerStrategy, coordinated from here)")
    if not cluster:
        raise NotPossible(f"run {run_name!r} has not placed its tasks yet, or its backend places them itself")
    return {"cluster": {job: list(addresses) for job, addresses in cluster.items()},
            "task": {"type": coordinator.type, "index": coordinator.index}}


def cluster_resolver(config: dict):
    """A SimpleClusterResolver for `config` (imports TensorFlow in the calling process)."""
    import tensorflow as tf

    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(config["cluster"]), task_type=config["task"]["type"], task_id=config["task"]["index"],
        rpc_layer="grpc")
