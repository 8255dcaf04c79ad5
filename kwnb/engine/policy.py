"""What a run does when a task fails or time runs out: relaunch on new ports, restart, stop the rest.

A pure function: `decide(view)` reads a frozen `View` of the run (taken by the supervisor under
the run's state lock) and returns a `Decision`; the Run carries it out under its own locks
(engine/run.py). The policy never touches the run, so it can be read, and tested, on its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from .status import Status

ON_FAILURE = ("stop", "keep", "restart")
PORT_RETRIES = 3

KEEP = "keep"  # nothing to do (a reason may still be recorded: every task has ended)
STOP = "stop"  # stop every task that still runs, with a reason
RELAUNCH = "relaunch"  # the same cluster on new ports (a port kwnb chose was taken)
RESTART = "restart"  # restart the whole cluster (--on-failure restart)


def check_options(on_failure: str, timeout: float | None, stall_after: float = 60.0) -> None:
    if not isinstance(stall_after, (int, float)) or stall_after < 0:
        raise OptionError(f"stall_after must be 0 (off) or a number of seconds, not {stall_after!r}")
    if on_failure not in ON_FAILURE:
        raise OptionError(f"on_failure must be one of {', '.join(ON_FAILURE)}, not {on_failure!r}")
    if timeout is not None and timeout <= 0:
        raise OptionError(f"timeout must be positive, not {timeout}")


@dataclass(frozen=True)
class TaskView:
    """What the policy reads of one task."""

    name: str  # as the logs say it, e.g. "worker 1"
    status: str
    alive: bool
    returncode: int | None
    address: str
    bind_failed: bool  # TensorFlow could not bind its port
    own_tf_config: bool  # the script set TF_CONFIG itself: a relaunch on new ports would not help
    training: bool = True  # False for a sidecar (an evaluator): its failure is not training's


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
    queued: float  # seconds the tasks waited in a scheduler's queue (engine/vitals.py): not counted by --timeout
    failed_at: float | None  # when a failure was first seen since the last (re)launch
    origin: str | None  # the diagnosis that says where the failure started, if any
    tasks: tuple[TaskView, ...]


@dataclass(frozen=True)
class Decision:
    action: str = KEEP
    reason: str = ""  # STOP: why the run ends; KEEP: why it ended, if no reason was given before
    note: str = ""  # what the user should be told (RELAUNCH)
    why: str = ""  # RELAUNCH, RESTART: the line written into every task's log where the new attempt begins
    timed_out: bool = False
    failed_at: float | None = None  # KEEP: remembered, for the grace period before the others are stopped


def decide(view: View) -> Decision:
    expired = _timed_out(view)
    if expired:
        return Decision(STOP, reason=expired, timed_out=True)
    # A sidecar evaluator that fails is not a failure of training (engine/roles.py).
    failed = [task for task in view.tasks if task.status == Status.FAILED and task.training]
    if not failed or view.stopping:
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
        return Decision(STOP, reason=f"{failure(view, failed)}; stopped the others after {view.failure_grace:g} s")
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
    return f"{failed[0].name} failed with exit code {failed[0].returncode}"


def _relaunch_on_new_ports(view: View, failed: list[TaskView]) -> Decision | None:
    """A port kwnb chose was taken before TensorFlow bound it: the same cluster on new ports."""
    # Only a port kwnb chose: a script that sets its own TF_CONFIG would clash again on every relaunch.
    clashed = [task for task in failed if task.bind_failed and not task.own_tf_config]
    if not clashed or view.port_retries >= PORT_RETRIES:
        return None
    first = clashed[0]
    return Decision(RELAUNCH, note=f"{first.name} could not bind {first.address} (taken after it was chosen); "
                                   f"relaunched the cluster on new ports",
                    why=f"port {first.address} was taken; new ports, try {view.port_retries + 2}")


def _restart(view: View, failed: list[TaskView]) -> Decision | None:
    if view.on_failure != "restart" or view.restarts >= view.max_restarts:
        return None
    first = failed[0]
    return Decision(RESTART, why=f"restart {view.restarts + 1} of the cluster: {first.name} exited with "
                                 f"{first.returncode}")
