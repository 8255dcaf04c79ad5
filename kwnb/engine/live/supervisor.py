"""The supervisor of a run: the thread that watches its tasks, diagnoses them, carries out the failure
policy's decisions and, however it ends, ends the run.

An object of its own, constructed with its run's side (RunSide: what it may read and call of the run,
by public names, declared here in one place). It cannot leave a run open: whatever the loop raises
becomes the run's reason (with its traceback in kwnb.log, engine/live/log.py), the tasks are stopped,
each end-of-run step (the launcher's finish, the on_end callbacks) runs guarded, and the run is marked
done in a `finally`. It owns what only it uses: when the failure was first seen, when it last
diagnosed, and what it noted of each task for the OOM killer's evidence (diagnoses/oom.py).
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Protocol

from ...backends import Launcher
from ...errors import KwnbError
from ..diagnoses import diagnose, oom
from ..diagnoses import stacks as stack_dumps
from ..diagnoses.diagnosis import Diagnosis, RunView
from . import policy
from ..tasks import vitals
from .log import LOG_NAME
from ..tasks.task import Task
from ..tasks.view import TaskView, view_of

POLL_SECONDS = 0.1
DIAGNOSE_SECONDS = 0.5  # findings are cheap, but need not be fresher than the dashboard's 4 redraws a second


class RunSide(Protocol):
    """What the supervisor reads and calls of its run (engine/live/run.py; its docstring describes the locks)."""

    name: str
    dir: Path
    script: Path
    user_files: tuple[str, ...]
    log: logging.Logger
    workers: list[Task]
    launcher: Launcher
    on_end: list[Callable]
    # the settings the policy and the diagnoses read
    timeout: float | None
    on_failure: str
    max_restarts: int
    failure_grace: float
    chief_grace: float
    stall_after: float
    started_at: float | None
    diagnoses: list[Diagnosis]  # read for the policy's origin; changed by apply_findings alone
    # what the supervisor changes, under state_lock (ended_at: at the end, before the on_end callbacks)
    ended_at: float | None
    timed_out: bool
    restarts: int
    port_retries: int

    @property
    def state_lock(self) -> threading.RLock: ...  # what views read: held for in-memory updates only

    @property
    def control_lock(self) -> threading.RLock: ...  # what changes processes: held across slow calls

    @property
    def stopping(self) -> bool: ...  # kwnb is ending the run (a stop, a timeout, the failure policy)

    def refresh(self) -> bool: ...  # observe every task, apply what was seen; whether anything changed

    def say(self, note: str = "", reason: str = "", replace: bool = True) -> None: ...

    def fail(self, reason: str) -> None: ...  # the run failed for `reason`, whatever its tasks did

    def apply_findings(self, found: list[Diagnosis], now: float, final: bool) -> None: ...  # diagnose.merge

    def stop_all(self, count_as_stop: bool = True) -> None: ...

    def stop_tasks(self, tasks: list[Task]) -> None: ...

    def relaunch(self, why: str) -> None: ...  # the same cluster again, `why` written into every log

    def end_sidecars(self) -> None: ...  # stop the sidecars whose grace period after training is over

    def finish_launcher(self) -> None: ...

    def mark_ended(self) -> None: ...  # nothing may wait for the run any longer


class Supervisor:
    """Watches one run from its start to its end, in its own thread (`supervise`)."""

    def __init__(self, run: RunSide):
        self.run = run
        self.failed_at: float | None = None  # when a failure was first seen since the last (re)launch
        self._diagnosed_at = 0.0
        self._memory = oom.MemoryWatch()

    def forget_failure(self) -> None:
        """A task was restarted (by the user): the policy's grace period starts again at the next failure."""
        self.failed_at = None

    def supervise(self) -> None:
        run = self.run
        try:
            try:
                self._watch()
            except Exception as error:  # a bug, a backend call that raised: the run must still end, and say why
                self._supervision_failed(error)
            guarded(run, "the last look at the tasks", self._last_look)
            self._finish()
        finally:  # whatever happened above, nothing may wait for this run forever
            run.mark_ended()

    def _watch(self) -> None:
        run, ended_before = self.run, 0
        while True:
            with run.control_lock:
                run.refresh()
                # A task that just exited is diagnosed at once, not at the next DIAGNOSE_SECONDS: the policy's
                # reason names the diagnosis (a NameError) only if it was found before the policy decides.
                ended = sum(task.returncode is not None for task in run.workers)
                self.diagnose(now_please=ended != ended_before)
                ended_before = ended
                self._carry_out(policy.decide(self._policy_view()))
                if all(task.returncode is not None for task in run.workers):
                    return
                run.end_sidecars()  # an evaluator outlives training by its grace period at most
            time.sleep(POLL_SECONDS)

    def _supervision_failed(self, error: Exception) -> None:
        run = self.run
        run.log.error("the supervisor failed; stopping the run", exc_info=error)
        where = traceback.extract_tb(error.__traceback__)[-1:]
        at = f" at {Path(where[0].filename).name} line {where[0].lineno}" if where else ""
        run.fail(f"kwnb's supervisor failed ({type(error).__name__}: {error}{at}); stopped the run "
                 f"(traceback in {run.dir / LOG_NAME})")
        with run.control_lock:
            guarded(run, "stopping the tasks", run.stop_all)

    def _last_look(self) -> None:
        with self.run.control_lock:
            self.run.refresh()
            self.diagnose(final=True)

    # ----- diagnosing ---------------------------------------------------------------------------
    def diagnose(self, final: bool = False, now_please: bool = False) -> None:
        """A diagnosis pass (engine/diagnoses/diagnose.py), at most every DIAGNOSE_SECONDS unless `now_please`."""
        run = self.run
        final = final or run.stopping  # once kwnb is ending the run, what held until then stays said
        now = time.time()
        if not (final or now_please or now - self._diagnosed_at >= DIAGNOSE_SECONDS):
            return
        self._diagnosed_at = now
        with run.state_lock:
            view = self._diagnosis_view(now)
        run.apply_findings(diagnose.findings(view, now, self._process_facts(view, now)), now, final)

    def _diagnosis_view(self, now: float) -> RunView:
        """What a diagnosis pass reads, copied under the state lock."""
        run = self.run
        return RunView(tasks=_views(run, now), name=run.name, script=run.script.name, user_files=run.user_files,
                       stall_after=run.stall_after, diagnoses=tuple(d.copy() for d in run.diagnoses),
                       env=dict(run.user_env), restart_limit=run.max_restarts if run.on_failure == "restart" else 0)

    def _process_facts(self, view: RunView, now: float) -> diagnose.ProcessFacts:
        """What a pass needs from the processes, gathered outside the state lock: the OOM killer's evidence
        and, when every live task is silent, their stacks (a signal each, and up to seconds of waiting)."""
        for task in view.tasks:
            self._memory.note(task)
        stalled = diagnose.wants_stacks(view, now)
        dumps = stack_dumps.capture([self.run.workers[p] for p in stalled]) if stalled else {}
        return diagnose.ProcessFacts(stacks=dumps, oom=self._memory.killed(list(view.tasks)))

    # ----- the failure policy -------------------------------------------------------------------
    def _policy_view(self) -> policy.View:
        """What the failure policy reads, copied under the state lock (engine/live/policy.py)."""
        run = self.run
        with run.state_lock:
            now = time.time()
            tasks = _views(run, now)
            origin = diagnose.origin(run.diagnoses, list(tasks))
            return policy.View(
                now=now, started_at=run.started_at, timeout=run.timeout, stopping=run.stopping,
                on_failure=run.on_failure, max_restarts=run.max_restarts, failure_grace=run.failure_grace,
                restarts=run.restarts, port_retries=run.port_retries, failed_at=self.failed_at,
                queued=vitals.queued_seconds([task.vitals for task in run.workers], now), chief_grace=run.chief_grace,
                single_tasks=run.launcher.controls_single_tasks,
                origin=origin.message if origin else None, tasks=tasks)

    def _carry_out(self, decision: policy.Decision) -> None:
        """Do what the failure policy decided; called under the control lock."""
        run = self.run
        if decision.action != policy.KEEP:
            run.log.info("failure policy: %s (%s)", decision.action, decision.reason or decision.why or decision.note)
        self.failed_at = decision.failed_at
        if decision.action == policy.STOP:
            run.say(reason=decision.reason)
            with run.state_lock:
                run.timed_out = run.timed_out or decision.timed_out
            run.stop_all()
        elif decision.action == policy.RELAUNCH:
            self.diagnose(now_please=True)  # port_taken, said before the relaunch withdraws it
            with run.state_lock:
                run.port_retries += 1
            run.say(note=decision.note)
            run.stop_all(count_as_stop=False)
            self._relaunch(decision.why)
        elif decision.action == policy.STOP_REST:  # the chief finished: the run is not stopping, an evaluator goes on
            run.say(note=decision.note, reason=decision.reason, replace=False)
            run.stop_tasks([task for task in run.workers if str(task.id) in decision.stop])
        elif decision.action == policy.RESTART:
            run.stop_all(count_as_stop=False)
            with run.state_lock:
                run.restarts += 1
                for task in run.workers:  # added to, not set: a task the user restarted keeps that count too
                    task.restarts += 1
            self._relaunch(decision.why)
        elif decision.reason:  # every task has ended: the first reason given stays
            run.say(reason=decision.reason, replace=False)

    def _relaunch(self, why: str) -> None:
        run = self.run
        self.failed_at = None
        try:
            run.relaunch(why)
        except KwnbError as error:  # a task that cannot start again (start_all stopped the others): the run ends
            run.log.error("the relaunch failed", exc_info=error)
            run.say(reason=f"could not relaunch the cluster: {error}")
            run.stop_all()

    def _finish(self) -> None:
        run = self.run
        run.ended_at = time.time()
        guarded(run, "finishing the launcher", run.finish_launcher)
        for callback in run.on_end:  # what a view writes is a bonus; a broken one must not hide the result
            guarded(run, getattr(callback, "__name__", "an on_end callback"), callback, run)


def _views(run: RunSide, now: float) -> tuple[TaskView, ...]:
    return tuple(view_of(task, now) for task in run.workers)


def guarded(run: RunSide, what: str, step: Callable, *args) -> None:
    """An end-of-run step that must not keep the others from running: a failure becomes a note
    (and its traceback goes to kwnb.log)."""
    try:
        step(*args)
    except Exception as error:
        run.log.error("%s failed", what, exc_info=error)
        run.say(note=f"{what} failed: {error}")
