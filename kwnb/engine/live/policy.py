"""What a run does when a task fails, time runs out or a chief task ends: relaunch on new ports,
restart, stop the rest.

A pure function: `decide(view)` reads a frozen `View` of the run (taken by the supervisor under
the run's state lock) and returns a `Decision`; the Run carries it out under its own locks
(engine/live/run.py). The policy never touches the run, so it can be read, and tested, on its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..tasks.roles import CHIEF_GRACE_SECONDS
from ..tasks.status import Status
from ..tasks.view import TaskView  # one task as the policy, the diagnoses and the views read it

ON_FAILURE = ("stop", "keep", "restart")
PORT_RETRIES = 3

KEEP = "keep"  # nothing to do (a reason may still be recorded: every task has ended)
STOP = "stop"  # stop every task that still runs, with a reason
RELAUNCH = "relaunch"  # the same cluster on new ports (a port kwnb chose was taken)
RESTART = "restart"  # restart the whole cluster (--on-failure restart)
STOP_REST = "stop_rest"  # the chief task finished: stop the training tasks `stop` names, with a note (not the run)


@dataclass(frozen=True)
class View:
    """What the policy reads of a run, copied at one moment."""

    now: float
    started_at: float
    timeout: float | None
    stopping: bool  # kwnb is already ending the run
    on_failure: str
    max_restarts: int
    failure_grace: float
    restarts: int  # cluster restarts the policy made so far (the user's own restarts do not count)
    port_retries: int
    queued: float  # seconds the tasks waited in a scheduler's queue (engine/tasks/vitals.py): not counted by --timeout
    failed_at: float | None  # when a failure was first seen since the last (re)launch
    origin: str | None  # the diagnosis that says where the failure started, if any
    tasks: tuple[TaskView, ...]  # the policy reads each one's status, exit, address and stop_requested
    chief_grace: float = CHIEF_GRACE_SECONDS  # how long training tasks may outlive a chief task that finished
    single_tasks: bool = True  # the backend can stop one task alone (Slurm's scancel stops a job's tasks together)
    failed_by_findings: tuple[int, ...] = ()  # tasks that exited 0 but a diagnosis says the others cannot go on without


@dataclass(frozen=True)
class Decision:
    action: str = KEEP
    reason: str = ""  # STOP: why the run ends; KEEP: why it ended, if no reason was given before
    note: str = ""  # what the user should be told (RELAUNCH)
    why: str = ""  # RELAUNCH, RESTART: the line written into every task's log where the new attempt begins
    stop: tuple[str, ...] = ()  # STOP_REST: the names of the tasks to stop
    timed_out: bool = False
    failed_at: float | None = None  # KEEP: remembered, for the grace period before the others are stopped
    failed_by_findings: tuple[int, ...] = ()  # STOP: tasks that exited 0 yet failed the run (View.failed_by_findings)


def decide(view: View) -> Decision:
    expired = _timed_out(view)
    if expired:
        return Decision(STOP, reason=expired, timed_out=True)
    if view.stopping:
        return Decision(KEEP, failed_at=view.failed_at)
    chief = _finished_chief(view)
    if chief is not None:  # a chief job whose chief exited 0: its outcome is the run's
        return _after_the_chief(view, chief)
    # A sidecar evaluator that fails is not a failure of training (engine/tasks/roles.py).
    failed = [task for task in view.tasks if task.training and (
        task.status == Status.FAILED or (task.position in view.failed_by_findings and not task.alive))]
    if not failed:
        return Decision(KEEP, failed_at=view.failed_at)
    relaunch = _relaunch_on_new_ports(view, failed) or _restart(view, failed)
    if relaunch is not None:
        return relaunch
    if not any(task.alive for task in view.tasks):
        return Decision(KEEP, reason=failure(view, failed), failed_at=view.failed_at)
    if view.on_failure == "keep":
        return Decision(KEEP, failed_at=view.failed_at)
    # MultiWorkerMirroredStrategy peers block forever in collectives once a peer is gone.
    failed_at = view.failed_at or view.now
    if view.now - failed_at >= view.failure_grace:
        return Decision(STOP, reason=f"{failure(view, failed)}; stopped the others after {view.failure_grace:g} s",
                        failed_by_findings=tuple(t.position for t in failed if t.status != Status.FAILED))
    return Decision(KEEP, failed_at=failed_at)


def _timed_out(view: View) -> str:
    """Why the run is out of time, or "": --timeout counts from the tasks' start, not the time a scheduler
    kept them queued (a job can wait hours for nodes; its time limit is Slurm's --time)."""
    if not view.timeout or view.stopping:
        return ""
    if view.now - view.started_at - view.queued <= view.timeout:
        return ""
    waited = f" of running, after {view.queued:.0f} s pending in the scheduler's queue" if view.queued >= 1 else ""
    return f"timed out after {view.timeout:g} s{waited}"


def failure(view: View, failed: list[TaskView]) -> str:
    """Where the failure started: the task a diagnosis blames (it raised or was killed), not the first to exit."""
    if view.origin is not None:
        return view.origin
    return f"{failed[0].id} failed with exit code {failed[0].returncode}"


def _finished_chief(view: View) -> TaskView | None:
    """The chief task, if the run has one and it exited 0. One that failed is a failure like any other."""
    return next((task for task in view.tasks if task.task_type == "chief" and task.status == Status.FINISHED
                 and task.ended_at is not None), None)


def _after_the_chief(view: View, chief: TaskView) -> Decision:
    """TensorFlow's and a TFJob's rule: the chief's exit decides a chief job. A worker that fails now does
    not fail the run (the reason says so); training tasks still running `chief_grace` seconds after the
    chief finished are stopped (a TFJob's CleanPodPolicy removes them), and the note says which."""
    reason = _failed_beside(view, chief)
    alive = [task for task in view.tasks if task.alive and not task.stop_requested]
    waited = view.now - chief.ended_at
    if not any(task.training for task in alive) or waited < view.chief_grace:
        return Decision(KEEP, reason=reason)
    # A sidecar keeps its own grace period (engine/tasks/roles.py), unless stopping one task stops them all.
    names = [str(task.id) for task in alive if task.training or not view.single_tasks]
    listed = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
    note = (f"the chief finished; stopped {listed} that {'were' if len(names) > 1 else 'was'} still running "
            f"{round(waited, 1):g} s later (the chief's exit decides a chief job)")
    return Decision(STOP_REST, reason=reason, note=note, stop=tuple(names))


def _failed_beside(view: View, chief: TaskView) -> str:
    """The reason of a finished chief job in which training tasks failed, or "": they did not fail it."""
    failed = [task for task in view.tasks if task.training and task.status == Status.FAILED]
    if not failed:
        return ""
    said = [f"{task.id} failed {'before' if (task.ended_at or 0) < chief.ended_at else 'after'} it "
            f"(exit code {task.returncode})" for task in failed]
    return f"the chief finished (exit 0); {', '.join(said)}"


def _relaunch_on_new_ports(view: View, failed: list[TaskView]) -> Decision | None:
    """A port kwnb chose was taken before TensorFlow bound it: the same cluster on new ports."""
    # Only a port kwnb chose: a script that sets its own TF_CONFIG would clash again on every relaunch.
    clashed = [task for task in failed if task.bind_failed and not task.own_tf_config]
    if not clashed or view.port_retries >= PORT_RETRIES:
        return None
    first = clashed[0]
    return Decision(RELAUNCH, note=f"{first.id} could not bind {first.address} (taken after it was chosen); "
                                   f"relaunched the cluster on new ports",
                    why=f"port {first.address} was taken; new ports, try {view.port_retries + 2}")


def _restart(view: View, failed: list[TaskView]) -> Decision | None:
    if view.on_failure != "restart" or view.restarts >= view.max_restarts:
        return None
    first = failed[0]
    return Decision(RESTART, why=f"restart {view.restarts + 1} of the cluster: {first.id} exited with "
                                 f"{first.returncode}")
