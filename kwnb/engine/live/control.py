"""What a user does to one task of a running run: kill it, restart it, read its stacks.

Steps on the run's engine side (engine/live/run_engine.py), which the learner's Run (run.py) calls for
`kill`, `restart` and `stacks`: they take the control lock, as every change to processes does, and write
what views read under the state lock.
"""
from __future__ import annotations

from ...errors import LaunchError, NotPossible
from ..diagnoses import stacks as stack_dumps
from ..tasks.task import Task
from .run_engine import RunEngine, log_separator


def kill(engine: RunEngine, chosen: Task) -> None:
    """SIGKILL one task, as a preempted machine: the failure policy then decides what follows."""
    _check_single_task_control(engine, "kill")
    with engine.control_lock:
        chosen._kill()


def restart(engine: RunEngine, chosen: Task) -> None:
    """Start one task again with the same TF_CONFIG, as a replaced machine rejoining the cluster."""
    _check_single_task_control(engine, "restart")
    with engine.control_lock:
        if engine.done:
            raise NotPossible(f"run {engine.name!r} has ended; launch it again instead")
        chosen._stop(engine.settings.stop_grace)
        engine.refresh()
        log_separator(chosen, f"{chosen.id} restarted by the user")
        try:
            process = engine.launcher.start(engine.launch_of(chosen, chosen.tf_config))
        except OSError as error:  # e.g. EAGAIN from fork: the task stays ended, the run goes on
            engine.log.error("could not restart %s", chosen.id, exc_info=error)
            raise LaunchError(f"could not restart {chosen.id}: {error}") from error
        except LaunchError as error:  # the backend's one line, also in the log under the separator
            log_separator(chosen, f"not restarted: {error}")
            raise
        with engine.state_lock:
            chosen.restarts += 1
            engine.user_restarts += 1  # not the failure policy's: --max-restarts does not count these
            chosen._started(process, chosen.tf_config)
        engine.failed_at = None  # the policy's grace period starts again at the next failure


def stacks(engine: RunEngine, chosen: list[Task], native: bool = False) -> dict[int, str]:
    """Every thread's Python stack of each of the `chosen` live tasks, by position; `native` adds py-spy's
    native frames where py-spy is installed and allowed."""
    with engine.control_lock:
        return stack_dumps.capture(chosen, native=native)


def _check_single_task_control(engine: RunEngine, action: str) -> None:  # Slurm signals a job's tasks together
    if not engine.launcher.controls_single_tasks:
        raise NotPossible(f"cannot {action} one task under --backend {engine.launcher.name}: kwnb can only "
                          f"signal the whole job there (%kw_stop {engine.name} stops it)")
