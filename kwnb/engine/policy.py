"""What a run does when a task fails or time runs out: relaunch on new ports, restart, stop the rest.

Called by the supervisor on every poll, under the run's control lock (see run.py); the state it
changes that views read (reason, notes, restarts) is written under the state lock.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..errors import OptionError
from . import diagnose, roles

if TYPE_CHECKING:
    from .run import Run

ON_FAILURE = ("stop", "keep", "restart")
PORT_RETRIES = 3


def check_options(on_failure: str, timeout: float | None, stall_after: float = 60.0) -> None:
    if not isinstance(stall_after, (int, float)) or stall_after < 0:
        raise OptionError(f"stall_after must be 0 (off) or a number of seconds, not {stall_after!r}")
    if on_failure not in ON_FAILURE:
        raise OptionError(f"on_failure must be one of {', '.join(ON_FAILURE)}, not {on_failure!r}")
    if timeout is not None and timeout <= 0:
        raise OptionError(f"timeout must be positive, not {timeout}")


def apply(run: "Run") -> None:
    now = time.time()
    if run.timeout and not run._stopping and now - run.started_at > run.timeout:
        with run._lock:
            run.reason, run.timed_out = f"timed out after {run.timeout:g} s", True
        run._stop_all()
        return
    # A sidecar evaluator that fails is not a failure of training (engine/roles.py).
    failed = [task for task in roles.training(run.workers) if task.status == "failed"]
    if not failed or run._stopping:
        return
    if _relaunch_on_new_ports(run, failed) or _restart(run, failed):
        return
    alive = [task for task in run.workers if task.alive]
    if not alive:
        with run._lock:
            run.reason = run.reason or failure(run, failed)
        return
    if run.on_failure == "keep":
        return
    # MultiWorkerMirroredStrategy peers block forever in collectives once a peer is gone.
    run._failed_at = run._failed_at or now
    if now - run._failed_at >= run.failure_grace:
        with run._lock:
            run.reason = f"{failure(run, failed)}; stopped the others after {run.failure_grace:g} s"
        run._stop_all()


def failure(run: "Run", failed: list) -> str:
    """Where the failure started: the task a diagnosis blames (it raised or was killed), not the first to exit."""
    cause = diagnose.origin(run)
    if cause is not None:
        return cause.message
    return f"{failed[0].id} failed with exit code {failed[0].returncode}"


def _relaunch_on_new_ports(run: "Run", failed: list) -> bool:
    """A port kwnb chose was taken before TensorFlow bound it: the same cluster on new ports."""
    # Only a port kwnb chose: a script that sets its own TF_CONFIG would clash again on every relaunch.
    clashed = [task for task in failed if task.bind_failed and task.signals.tf_config_set is None]
    if not clashed or run.port_retries >= PORT_RETRIES:
        return False
    run._diagnose(now_please=True)  # port_taken, said before the relaunch withdraws it
    with run._lock:
        run.port_retries += 1
        run.notes.append(f"{clashed[0].id} could not bind {clashed[0].address} (taken after it was chosen); "
                         f"relaunched the cluster on new ports")
    run._stop_all(count_as_stop=False)
    run._relaunch_all(f"port {clashed[0].address} was taken; new ports, try {run.port_retries + 1}")
    return True


def _restart(run: "Run", failed: list) -> bool:
    if run.on_failure != "restart" or run.restarts >= run.max_restarts:
        return False
    first = failed[0]
    run._stop_all(count_as_stop=False)
    with run._lock:
        run.restarts += 1
        for task in run.workers:
            task.restarts = run.restarts
    run._relaunch_all(f"restart {run.restarts} of the cluster: {first.id} exited with {first.returncode}")
    return True
