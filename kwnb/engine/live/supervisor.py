"""The supervisor of a run: the thread that watches its tasks, diagnoses them, carries out the failure
policy's decisions and, however it ends, ends the run.

An object of its own, working on the run's engine side (engine/live/run_engine.py: RunEngine, whose fields
say which lock guards them) and given the learner's Run only to hand it to the on_end callbacks. It cannot
leave a run open: whatever the loop raises becomes the run's reason (with its traceback in kwnb.log,
engine/live/log.py), the tasks are stopped, each end-of-run step (the launcher's finish, the on_end
callbacks) runs guarded, and the run is marked done in a `finally`. It owns what only its thread uses: when
it last diagnosed, and what it noted of each task for the OOM killer's evidence (diagnoses/oom.py).
"""
from __future__ import annotations

import threading
import time
import traceback
from pathlib import Path

from ...errors import KwnbError
from ..diagnoses import diagnose, oom, saves, stall
from ..diagnoses import stacks as stack_dumps
from ..diagnoses.diagnosis import RunView
from . import policy
from ..tasks import vitals
from .after_end import AfterEnd
from .log import LOG_NAME
from .run_engine import RunEngine, guarded
from ..tasks.view import TaskView, view_of

POLL_SECONDS = 0.1
DIAGNOSE_SECONDS = 0.5  # findings are cheap, but need not be fresher than the dashboard's 4 redraws a second


class Supervisor:
    """Watches one run from its start to its end, in its own thread (`supervise`)."""

    def __init__(self, engine: RunEngine, run: object):
        self.engine = engine
        self.run = run  # what the on_end callbacks get: the learner's Run (engine/live/run.py)
        self._diagnosed_at = 0.0
        self._stacks_at = 0.0  # when a pass last captured the tasks' stacks for a stall
        self._memory = oom.MemoryWatch()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """The supervisor's thread, once the tasks have started: a daemon, so that it never holds Python's exit."""
        self.thread = threading.Thread(target=self.supervise, name=f"kwnb-{self.engine.name}", daemon=True)
        self.thread.start()

    def supervise(self) -> None:
        engine = self.engine
        try:
            try:
                self._watch()
            except Exception as error:  # a bug, a backend call that raised: the run must still end, and say why
                self._supervision_failed(error)
            guarded(engine, "the last look at the tasks", self._last_look)
            self._finish()
        finally:  # whatever happened above, nothing may wait for this run forever
            engine.mark_ended()

    def _watch(self) -> None:
        engine, ended_before = self.engine, 0
        while True:
            with engine.control_lock:
                engine.refresh()
                # A task that just exited is diagnosed at once, not at the next DIAGNOSE_SECONDS: the policy's
                # reason names the diagnosis (a NameError) only if it was found before the policy decides.
                ended = sum(task.returncode is not None for task in engine.workers)
                self.diagnose(now_please=ended != ended_before)
                ended_before = ended
                self._carry_out(policy.decide(self._policy_view()))
                if all(task.returncode is not None for task in engine.workers):
                    return
                engine.end_sidecars()  # an evaluator outlives training by its grace period at most
            time.sleep(POLL_SECONDS)

    def _supervision_failed(self, error: Exception) -> None:
        engine = self.engine
        engine.log.error("the supervisor failed; stopping the run", exc_info=error)
        where = traceback.extract_tb(error.__traceback__)[-1:]
        at = f" at {Path(where[0].filename).name} line {where[0].lineno}" if where else ""
        engine.fail(f"kwnb's supervisor failed ({type(error).__name__}: {error}{at}); stopped the run "
                    f"(traceback in {engine.dir / LOG_NAME})")
        with engine.control_lock:
            guarded(engine, "stopping the tasks", engine.stop_all)

    def _last_look(self) -> None:
        with self.engine.control_lock:
            self.engine.refresh()
            self.diagnose(final=True)

    # ----- diagnosing ---------------------------------------------------------------------------
    def diagnose(self, final: bool = False, now_please: bool = False) -> None:
        """A diagnosis pass (engine/diagnoses/diagnose.py), at most every DIAGNOSE_SECONDS unless `now_please`."""
        engine = self.engine
        final = final or engine.stopping  # once kwnb is ending the run, what held until then stays said
        now = time.time()
        if not (final or now_please or now - self._diagnosed_at >= DIAGNOSE_SECONDS):
            return
        self._diagnosed_at = now
        with engine.state_lock:
            view = self._diagnosis_view(now)
        engine.apply_findings(diagnose.findings(view, now, self._process_facts(view, now)), now, final)

    def _diagnosis_view(self, now: float) -> RunView:
        """What a diagnosis pass reads, copied under the state lock."""
        engine, settings = self.engine, self.engine.settings
        return RunView(tasks=_views(engine, now), name=engine.name, script=engine.script.name,
                       user_files=engine.user_files, saves=engine.saves,
                       stall_after=settings.stall_after, diagnoses=tuple(d.copy() for d in engine.diagnoses),
                       env=dict(engine.user_env), framework=engine.framework.name,
                       restart_limit=settings.max_restarts if settings.on_failure == "restart" else 0,
                       hand_sharding=engine.hand_sharding, stacks_at=self._stacks_at)

    def _process_facts(self, view: RunView, now: float) -> diagnose.ProcessFacts:
        """What a pass needs from the processes, gathered outside the state lock: the OOM killer's evidence
        and, when every live task is silent, their stacks (a signal each, and up to seconds of waiting)."""
        for task in view.tasks:
            self._memory.note(task)
        stalled = stall.wants_stacks(view, now)
        dumps = stack_dumps.capture([self.engine.workers[p] for p in stalled]) if stalled else {}
        if stalled:
            self._stacks_at = now
        written = saves.written(view.saves, self.engine.cwd, self.engine.started_at) \
            if not any(task.alive for task in view.tasks) else {}
        return diagnose.ProcessFacts(stacks=dumps, oom=self._memory.killed(list(view.tasks)), written=written)

    # ----- the failure policy -------------------------------------------------------------------
    def _policy_view(self) -> policy.View:
        """What the failure policy reads, copied under the state lock (engine/live/policy.py)."""
        engine, settings = self.engine, self.engine.settings
        with engine.state_lock:
            now = time.time()
            tasks = _views(engine, now)
            origin = diagnose.origin(engine.diagnoses, list(tasks))
            return policy.View(
                now=now, started_at=engine.started_at, timeout=settings.timeout, stopping=engine.stopping,
                on_failure=settings.on_failure, max_restarts=settings.max_restarts,
                failure_grace=settings.failure_grace, restarts=engine.restarts, port_retries=engine.port_retries,
                failed_at=engine.failed_at, queued=vitals.queued_seconds([task.vitals for task in engine.workers], now),
                chief_grace=settings.chief_grace,
                single_tasks=engine.launcher.controls_single_tasks,
                origin=origin.message if origin else None, tasks=tasks,
                failed_by_findings=diagnose.failed_by_findings(engine.diagnoses, list(tasks)))

    def _carry_out(self, decision: policy.Decision) -> None:
        """Do what the failure policy decided; called under the control lock."""
        engine = self.engine
        if decision.action != policy.KEEP:
            engine.log.info("failure policy: %s (%s)", decision.action,
                            decision.reason or decision.why or decision.note)
        engine.failed_at = decision.failed_at
        if decision.action == policy.STOP:
            with engine.state_lock:
                engine.failed_by_findings = decision.failed_by_findings
            engine.say(reason=decision.reason)
            with engine.state_lock:
                engine.timed_out = engine.timed_out or decision.timed_out
            engine.stop_all()
        elif decision.action == policy.RELAUNCH:
            self.diagnose(now_please=True)  # port_taken, said before the relaunch withdraws it
            with engine.state_lock:
                engine.port_retries += 1
            engine.say(note=decision.note)
            engine.stop_all(count_as_stop=False)
            self._relaunch(decision.why)
        elif decision.action == policy.STOP_REST:  # the chief finished: the run is not stopping, an evaluator goes on
            engine.say(note=decision.note, reason=decision.reason, replace=False)
            engine.stop_tasks([task for task in engine.workers if str(task.id) in decision.stop])
        elif decision.action == policy.RESTART:
            engine.stop_all(count_as_stop=False)
            with engine.state_lock:
                engine.restarts += 1
                for task in engine.workers:  # added to, not set: a task the user restarted keeps that count too
                    task.restarts += 1
            self._relaunch(decision.why)
        elif decision.reason:  # every task has ended: the first reason given stays
            engine.say(reason=decision.reason, replace=False)

    def _relaunch(self, why: str) -> None:
        engine = self.engine
        engine.failed_at = None
        try:
            engine.relaunch(why)
        except KwnbError as error:  # a task that cannot start again (start_all stopped the others): the run ends
            engine.log.error("the relaunch failed", exc_info=error)
            engine.say(reason=f"could not relaunch the cluster: {error}")
            engine.stop_all()

    def _finish(self) -> None:
        engine = self.engine
        with engine.state_lock:
            engine.ended_at = time.time()
        guarded(engine, "finishing the launcher", engine.finish_launcher)
        for callback in engine.on_end:  # what a view writes is a bonus; a broken one must not hide the result
            name = getattr(callback, "__name__", "an on_end callback")
            after = guarded(engine, name, callback, self.run)
            if isinstance(after, AfterEnd):  # more to do after the end (kwnb.launch's pictures)
                guarded(engine, f"{name} after the end", engine.go_on, after)


def _views(engine: RunEngine, now: float) -> tuple[TaskView, ...]:
    return tuple(view_of(task, now) for task in engine.workers)
