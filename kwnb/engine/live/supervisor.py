"""The supervisor of a run: the thread that watches its tasks, carries out the failure policy's
decisions and, however it ends, ends the run.

A part of Run (engine/live/run.py), kept apart because it is one idea: what happens on every poll and at
the end. It cannot leave a run open: whatever the loop raises becomes the run's reason (with its
traceback in kwnb.log, engine/live/log.py), the tasks are stopped, each end-of-run step (the launcher's
finish, the on_end callbacks) runs guarded, and the run is marked done in a `finally`.
"""
from __future__ import annotations

import threading
import time
import traceback
from pathlib import Path
from typing import Callable

from ...errors import KwnbError
from ..diagnoses import diagnose
from . import policy
from ..tasks import roles, vitals
from .log import LOG_NAME
from ..tasks.status import Status
from ..tasks.view import view_of

POLL_SECONDS = 0.1


class Supervisor:
    """The supervisor's half of Run; the attributes below are Run's (see its docstring for the locks)."""

    _lock: threading.RLock
    _control: threading.RLock
    _done: threading.Event

    def _supervise(self) -> None:
        try:
            try:
                self._watch()
            except Exception as error:  # a bug, a backend call that raised: the run must still end, and say why
                self._supervision_failed(error)
            self._guarded("the last look at the tasks", self._last_look)
            self._finish()
        finally:  # whatever happened above, nothing may wait for this run forever
            self.ended_at = self.ended_at or time.time()
            self._done.set()

    def _watch(self) -> None:
        ended_before = 0
        while True:
            with self._control:
                self._refresh()
                # A task that just exited is diagnosed at once, not at the next DIAGNOSE_SECONDS: the policy's
                # reason names the diagnosis (a NameError) only if it was found before the policy decides.
                ended = sum(task.returncode is not None for task in self.workers)
                self._diagnose(now_please=ended != ended_before)
                ended_before = ended
                self._carry_out(policy.decide(self._policy_view()))
                if all(task.returncode is not None for task in self.workers):
                    return
                self._end_sidecars()  # an evaluator outlives training by its grace period at most
            time.sleep(POLL_SECONDS)

    def _supervision_failed(self, error: Exception) -> None:
        self.log.error("the supervisor failed; stopping the run", exc_info=error)
        where = traceback.extract_tb(error.__traceback__)[-1:]
        at = f" at {Path(where[0].filename).name} line {where[0].lineno}" if where else ""
        self._say(reason=f"kwnb's supervisor failed ({type(error).__name__}: {error}{at}); stopped the run "
                         f"(traceback in {self.dir / LOG_NAME})")
        self._outcome = Status.FAILED
        with self._control:
            self._guarded("stopping the tasks", self._stop_all)

    def _last_look(self) -> None:
        with self._control:
            self._refresh()
            self._diagnose(final=True)

    def _policy_view(self) -> policy.View:
        """What the failure policy reads, copied under the state lock (engine/live/policy.py)."""
        with self._lock:
            now = time.time()
            tasks = tuple(view_of(task, now) for task in self.workers)
            origin = diagnose.origin(self.diagnoses, list(tasks))
            return policy.View(
                now=now, started_at=self.started_at, timeout=self.timeout, stopping=self._stopping,
                on_failure=self.on_failure, max_restarts=self.max_restarts, failure_grace=self.failure_grace,
                restarts=self.restarts, port_retries=self.port_retries, failed_at=self._failed_at,
                queued=vitals.queued_seconds([task.vitals for task in self.workers], now), chief_grace=self.chief_grace,
                single_tasks=self.launcher.controls_single_tasks,
                origin=origin.message if origin else None, tasks=tasks)

    def _carry_out(self, decision: policy.Decision) -> None:
        """Do what the failure policy decided; called by the supervisor under the control lock."""
        if decision.action != policy.KEEP:
            self.log.info("failure policy: %s (%s)", decision.action, decision.reason or decision.why or decision.note)
        self._failed_at = decision.failed_at
        if decision.action == policy.STOP:
            self._say(reason=decision.reason)
            with self._lock:
                self.timed_out = self.timed_out or decision.timed_out
            self._stop_all()
        elif decision.action == policy.RELAUNCH:
            self._diagnose(now_please=True)  # port_taken, said before the relaunch withdraws it
            with self._lock:
                self.port_retries += 1
            self._say(note=decision.note)
            self._stop_all(count_as_stop=False)
            self._relaunch(decision.why)
        elif decision.action == policy.STOP_REST:  # the chief finished: the run is not stopping, an evaluator goes on
            self._say(note=decision.note, reason=decision.reason, replace=False)
            self._stop_tasks([task for task in self.workers if str(task.id) in decision.stop])
        elif decision.action == policy.RESTART:
            self._stop_all(count_as_stop=False)
            with self._lock:
                self.restarts += 1
                for task in self.workers:  # added to, not set: a task the user restarted keeps that count too
                    task.restarts += 1
            self._relaunch(decision.why)
        elif decision.reason:  # every task has ended: the first reason given stays
            self._say(reason=decision.reason, replace=False)

    def _relaunch(self, why: str) -> None:
        try:
            self._relaunch_all(why)
        except KwnbError as error:  # a task that cannot start again (start_all stopped the others): the run ends
            self.log.error("the relaunch failed", exc_info=error)
            self._say(reason=f"could not relaunch the cluster: {error}")
            self._stop_all()

    def _finish(self) -> None:
        self.ended_at = time.time()
        self._guarded("finishing the launcher", self._finish_launcher)
        for callback in self.on_end:  # what a view writes is a bonus; a broken one must not hide the result
            self._guarded(getattr(callback, "__name__", "an on_end callback"), callback, self)

    def _finish_launcher(self) -> None:
        for note in self.launcher.finish():  # e.g. Slurm's scancel of a job that outlived its tasks
            self._say(note=note)

    def _guarded(self, what: str, step: Callable, *args) -> None:
        """An end-of-run step that must not keep the others from running: a failure becomes a note
        (and its traceback goes to kwnb.log)."""
        try:
            step(*args)
        except Exception as error:
            self.log.error("%s failed", what, exc_info=error)
            self._say(note=f"{what} failed: {error}")

