"""What a user does to one task of a running run: kill it, restart it, read its stacks.

A part of Run (engine/live/run.py), as the supervisor is (engine/live/supervisor.py): these take the control
lock, as every change to processes does, and write what views read under the state lock.
"""
from __future__ import annotations

import threading

from ...errors import LaunchError, NotPossible
from ..diagnoses import stacks as stack_dumps


class TaskControl:
    """The user's controls of single tasks; the attributes below are Run's (see its docstring for the locks)."""

    _lock: threading.RLock
    _control: threading.RLock

    def kill(self, task: int | str) -> None:
        """SIGKILL one task, as a preempted machine: the failure policy then decides what follows."""
        chosen = self.task(task)
        self._check_single_task_control("kill")
        with self._control:
            chosen._kill()

    def restart(self, task: int | str) -> None:
        """Start one task again with the same TF_CONFIG, as a replaced machine rejoining the cluster."""
        chosen = self.task(task)
        self._check_single_task_control("restart")
        with self._control:
            if self.done:
                raise NotPossible(f"run {self.name!r} has ended; launch it again instead")
            chosen._stop(self.stop_grace)
            self.refresh()
            log_separator(chosen, f"{chosen.id} restarted by the user")
            try:
                process = self.launcher.start(self._launch_of(chosen, chosen.tf_config))
            except OSError as error:  # e.g. EAGAIN from fork: the task stays ended, the run goes on
                self.log.error("could not restart %s", chosen.id, exc_info=error)
                raise LaunchError(f"could not restart {chosen.id}: {error}") from error
            with self._lock:
                chosen.restarts += 1
                self.user_restarts += 1  # not the failure policy's: --max-restarts does not count these
                chosen._started(process, chosen.tf_config)
            self._supervisor.forget_failure()

    def stacks(self, task: int | str | None = None, native: bool = False) -> dict[int, str]:
        """Every thread's Python stack of each live task (or of one), by position; `native` adds py-spy's
        native frames where py-spy is installed and allowed."""
        chosen = self.workers if task is None else [self.task(task)]
        with self._control:
            return stack_dumps.capture(chosen, native=native)

    def _check_single_task_control(self, action: str) -> None:  # Slurm signals a job's tasks together
        if not self.launcher.controls_single_tasks:
            raise NotPossible(f"cannot {action} one task under --backend {self.launcher.name}: kwnb can only "
                              f"signal the whole job there (%kw_stop {self.name} stops it)")


def log_separator(task, why: str) -> None:
    """Logs are appended across restarts, with a line that shows where each attempt begins."""
    with open(task.log_path, "ab") as log:
        log.write(f"\n===== kwnb: {why} =====\n".encode())
