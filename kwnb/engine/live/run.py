"""A run: one launch of a script on a cluster of tasks, watched from start to end.

One supervisor thread per run (supervisor.py) polls the tasks, diagnoses them, carries out the failure
policy's decisions (policy.py) and, at the end, calls the run's `on_end` callbacks (the views write
summary.txt and curves.png there).
Everything a dashboard or terminal shows is read from here, so the notebook, the terminal and the
tests see the same run the same way.

Two locks, so that a view never waits for a process call:
- `_lock`, the state lock, guards what views read (each task's screen, metrics, status, exit code;
  the run's reason, notes, diagnoses and counts). It is held only for in-memory updates; the reason
  and notes are written by `say` alone.
- `_control`, the control lock, serialises what changes processes (launch, poll, stop, kill,
  restart, carrying out the failure policy's decisions) and guards `_stopping` and the supervisor's own state.
  It may be held across slow calls (squeue, a stop's grace period); views never take it.

A launch is all or nothing: if one task cannot start, those started are stopped, the launcher is
finished and the run ends with the error as its reason (its traceback in kwnb.log, engine/live/log.py).
"""
from __future__ import annotations

import os
import shlex
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from ...backends import Launcher, TaskLaunch, make_launcher
from ...errors import KwnbError, LaunchError, NotPossible
from ...task.runfolder import RunFolder, default_runs_dir, new_run_dir
from . import cluster as clusters
from ..diagnoses import diagnose
from ..diagnoses.diagnosis import Diagnosis
from ..tasks import roles
from .log import LOG_NAME, for_run
from ...machine.task_env import TaskFacts, plan_gpus, task_environment
from .inputs import check_script, find_python
from ..readers.metrics import unsummed_note
from ..readers.tensorboard import TensorBoardScalars
from ..records.reading import RunReading
from ..tasks.status import Status
from .settings import LaunchSettings
from .supervisor import Supervisor, guarded
from .control import TaskControl, log_separator
from .coordinator import CoordinatorSide
from ..records.record import record_description, record_result
from ..records.snapshot import RunSnapshot, snapshot_of_run
from ..records.summary import format_summary
from ..tasks.task import Task


class Run(RunReading, TaskControl, CoordinatorSide):
    """A script running on a cluster. Start with `kwnb.launch()`; the notebook shows it as a dashboard."""

    def __init__(self, script: str | os.PathLike, n: int = 2, name: str | None = None, **options):
        """`options`: LaunchSettings' fields (engine/live/settings.py), e.g. ps=1, timeout=600."""
        settings = self.settings = LaunchSettings.of("Run.__init__", n=n, name=name, **options)
        self.cwd = Path(settings.cwd or os.getcwd()).resolve()
        self.script = (self.cwd / script).resolve()
        self.name = settings.name or self.script.stem
        self.task_ids = clusters.plan_tasks(settings.n, ps=settings.ps, chief=settings.chief,
                                            evaluator=settings.evaluator)
        self.coordinator = clusters.coordinator_of(self.task_ids)  # a chief entry for the caller (roles.py)
        check_script(self.script)
        self.python = find_python(settings.python)
        args = settings.args
        self.args = shlex.split(args) if isinstance(args, str) else list(args or [])
        self.user_env = dict(settings.env or {})
        self.stall_after = settings.stall_after  # seconds without progress before `stalled`; 0 turns it off
        self.timeout, self.on_failure, self.max_restarts = settings.timeout, settings.on_failure, settings.max_restarts
        self.failure_grace, self.stop_grace = settings.failure_grace, settings.stop_grace
        self.chief_grace = settings.chief_grace  # grace: engine/tasks/roles.py
        # where the tasks write event files, if not under cwd (engine/readers/tensorboard.py)
        self.logdir = (self.cwd / settings.logdir).resolve() if settings.logdir else None
        self.gpus = settings.gpus
        launcher = settings.launcher
        self.launcher = make_launcher(launcher, network=settings.network, warm=settings.warm) \
            if isinstance(launcher, str) else launcher
        self.launcher.check()
        self._make_folder(settings.runs_dir, settings.files, settings.keep_lines, tuple(settings.outputs or ()))
        self._sidecars = roles.Sidecars(self.workers, settings.evaluator_grace)
        # Called once, after every task ended; record_result writes how the run went into run.json (engine/records/record.py).
        self.on_end: list[Callable[[Run], None]] = [*(settings.on_end or []), record_result]
        self.after_end: list[threading.Thread] = []  # what a callback goes on doing after the end: wait(pictures=True)
        self._init_progress()
        # Each task's GPUs, when --gpus starts them on this machine (a scheduler places its own).
        placed_here = settings.gpus and self.launcher.runs_here
        self.gpu_placement, note = plan_gpus(len(self.workers), self.user_env) if placed_here else (None, "")
        self.say(note=note)

    def _make_folder(self, runs_dir, files, keep_lines: int, outputs: tuple) -> None:
        """The run's folder: its log (kwnb.log), the job's files, a log per task, and run.json."""
        self.dir = new_run_dir(Path(runs_dir) if runs_dir else default_runs_dir(self.cwd), self.name)
        self.folder = RunFolder(self.dir)
        self.log = for_run(self.dir)  # kwnb's own account of the run: kwnb.log in its folder
        self.files = self._keep_files(files or [])
        self.workers = self._make_tasks(keep_lines, outputs)
        self._write_description()

    def _init_progress(self) -> None:
        """What changes while the run goes, and the locks that guard it (see the module's docstring)."""
        self.cluster: dict | None = None  # the cluster spec of the latest launch, where kwnb placed the tasks
        self.restarts = 0  # cluster restarts by the failure policy: what --max-restarts limits
        self.user_restarts = 0  # tasks restarted by the user (%kw_restart, Run.restart): not limited
        self.port_retries = 0
        self.reason = ""  # why the run ended early, in words
        self.notes: list[str] = []  # things the user should be told, e.g. a replaced run
        self.timed_out = False
        self.diagnoses: list[Diagnosis] = []  # what kwnb found wrong, in one sentence each
        self.diagnosis_history: list[Diagnosis] = []  # every one ever made, withdrawn ones too
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self._lock = threading.RLock()
        self._control = threading.RLock()
        self._done = threading.Event()
        self._stopping = False
        self._outcome: Status | None = None  # set when the run ended before its tasks could (a failed launch)
        self._thread: threading.Thread | None = None
        self._supervisor = Supervisor(self)  # its thread starts with the run (engine/live/supervisor.py)

    def _keep_files(self, files: list) -> list[Path]:
        """What ran, even if the cells change later: the script and the job's helper modules, copied."""
        kept = [Path(f).resolve() for f in files]
        self.user_files = (str(self.script), *map(str, kept))  # whose frames a diagnosis names
        for path in [self.script, *kept]:
            if path.is_file():
                shutil.copy2(path, self.dir / path.name)
        return kept

    def _make_tasks(self, keep_lines: int, outputs: tuple) -> list[Task]:
        """outputs: besides each task's own state, who gets every read's lines, output(task_id, lines), under
        the state lock (engine/readers/output.py; `kwnb run`'s terminal)."""
        replicas = sum(task.type in ("chief", "worker") for task in self.task_ids)
        tasks = [Task(i, task_id, self.folder.log(task_id.type, task_id.index), self.folder.metrics(i), keep_lines,
                      step_scale=1.0 / replicas, user_files=self.user_files, outputs=outputs)
                 for i, task_id in enumerate(self.task_ids)]
        roles.prepare(tasks)  # which is the chief; an evaluator's curves are per checkpoint
        for task in tasks:  # created private: logs can hold data and tracebacks
            os.close(os.open(task.log_path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600))
        return tasks

    def _write_description(self) -> None:
        record_description(self)  # run.json: what was launched (engine/records/record.py)

    # ----- life cycle -------------------------------------------------------------------------
    def start(self) -> "Run":
        if self.started_at is not None or self.done:
            raise NotPossible(f"run {self.name!r} was started or stopped already; launch it again instead")
        self.started_at = time.time()
        replicas = sum(task.type in ("chief", "worker") for task in self.task_ids)
        self._tensorboard = TensorBoardScalars([self.dir, self.cwd, self.logdir], self.started_at,
                                               batch_scale=1.0 / replicas)
        try:
            with self._control:
                self._launch_all()
        except BaseException as error:  # e.g. a job the scheduler rejected: the run is over before it began
            self._launch_failed(error)
            if isinstance(error, KwnbError) or not isinstance(error, Exception):
                raise
            raise LaunchError(f"could not start run {self.name!r}: {type(error).__name__}: {error} "
                              f"(details in {self.dir / LOG_NAME})") from error
        for note in self.launcher.take_notes():  # now, so the magic prints them as the run starts
            self.say(note=note)
        self.log.info("started %d tasks with %s", len(self.workers), self.launcher.name)
        self._thread = threading.Thread(target=self._supervisor.supervise, name=f"kwnb-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _launch_failed(self, error: BaseException) -> None:
        """All or nothing: the tasks that started are stopped (start_all stops its own), the launcher is
        finished (which releases the warm pool) and the run ends, failed, with the error as its reason."""
        try:
            self.log.error("the launch failed; stopping what started", exc_info=error)
            self.fail(f"could not start: {error}")
            with self._control:
                guarded(self, "stopping the tasks", self.stop_all)
            guarded(self, "finishing the launcher", self.finish_launcher)
        finally:
            self.ended_at = time.time()
            self._done.set()

    def _launch_all(self) -> None:
        members = self.task_ids + ([self.coordinator] if self.coordinator else [])
        addresses = self.launcher.addresses(members)
        cluster = clusters.cluster_spec(members, addresses) if addresses is not None else None
        self.cluster = cluster
        configs = [clusters.tf_config(cluster, task.id) if cluster else {} for task in self.workers]
        launches = [self._launch_of(task, config) for task, config in zip(self.workers, configs)]
        processes = self.launcher.start_all(launches)  # all or none (backends/base.py)
        with self._lock:
            for task, process, config in zip(self.workers, processes, configs):
                task._started(process, config)

    def _launch_of(self, task: Task, config: dict) -> TaskLaunch:
        for stale in (self.folder.stacks(task.position), self.folder.tf_config_set(task.position)):
            stale.unlink(missing_ok=True)  # the last attempt's: its stacks file also says "ready for signals"
        return TaskLaunch(task.id, self.python, str(self.script), self.args, self._env(task, config), str(self.cwd),
                          task.log_path)

    def _env(self, task: Task, config: dict) -> dict[str, str]:
        facts = TaskFacts(gpus=self.gpus, run_dir=str(self.dir), position=task.position, config=config,
                          placement=self.gpu_placement)
        return task_environment(facts, self.user_env)  # built in machine/task_env.py only

    # ----- the supervisor's side (RunSide in engine/live/supervisor.py) ------------------------
    def refresh(self) -> bool:
        """Observe every task (slow, no state lock), then apply what was seen (quick, under it)."""
        seen = [task.observe() for task in self.workers]
        # TensorBoard scalars (engine/readers/tensorboard.py) are the chief's curves too; a last look at the end.
        epochs, steps = self._tensorboard.poll_safely(lambda note: self.say(note=note),
                                                      rescan=all(t.returncode is not None for t in self.workers))
        with self._lock:
            changed = any([task.apply(observation) for task, observation in zip(self.workers, seen)])
            if epochs or steps:
                self.chief.metrics.feed_rows(epochs, steps, steps_per_epoch=self._tensorboard.steps_per_epoch)
            return changed or bool(epochs or steps)

    def end_sidecars(self) -> None:
        """Training is over: after their grace period, stop the sidecars (an evaluator) still running."""
        due = self._sidecars.due()
        if due:
            self.say(note=self._sidecars.stop(due, lambda task: task._stop(self.stop_grace)))
            self.refresh()

    def stop_all(self, count_as_stop: bool = True) -> None:
        self._stopping = count_as_stop
        self.stop_tasks(self.workers)

    def stop_tasks(self, tasks: list[Task]) -> None:
        """TERM, then KILL after stop_grace, to every task at once (TensorFlow catches TERM), then a look."""
        stoppers = [threading.Thread(target=guarded, args=(self, f"stopping {task.id}", task._stop, self.stop_grace))
                    for task in tasks]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        self.refresh()

    def relaunch(self, why: str) -> None:
        for task in self.workers:
            log_separator(task, why)
        self._launch_all()

    def say(self, note: str = "", reason: str = "", replace: bool = True) -> None:
        """The one writer of the run's notes and reason (under the state lock); both go to kwnb.log too."""
        with self._lock:
            if note:
                self.notes.append(note)
            if reason and (replace or not self.reason):
                self.reason = reason
        for text in (note, reason):
            if text:
                self.log.info("%s: %s", "note" if text is note else "reason", text)

    def fail(self, reason: str) -> None:
        """The run failed for `reason`, whatever its tasks did (a launch or the supervisor that raised)."""
        self.say(reason=reason)
        self._outcome = Status.FAILED

    def apply_findings(self, found: list[Diagnosis], now: float, final: bool) -> None:
        """What a diagnosis pass found, merged into the diagnoses under the state lock (diagnose.merge)."""
        with self._lock:
            self.diagnoses, new = diagnose.merge(self.diagnoses, found, now, final=final)
            self.diagnosis_history.extend(new)

    def finish_launcher(self) -> None:
        for note in self.launcher.finish():  # e.g. Slurm's scancel of a job that outlived its tasks
            self.say(note=note)
        self.say(note=unsummed_note([task.metrics for task in self.workers]))

    def mark_ended(self) -> None:
        """The supervisor's last step: nothing may wait for this run any longer."""
        self.ended_at = self.ended_at or time.time()
        self._done.set()

    @property
    def state_lock(self) -> threading.RLock:
        return self._lock

    @property
    def control_lock(self) -> threading.RLock:
        return self._control

    @property
    def stopping(self) -> bool:
        """kwnb is ending the run: a stop, a timeout or the failure policy (not a relaunch)."""
        return self._stopping

    def add_note(self, note: str) -> None:
        """Tell the user something about this run (its summary lists the notes), e.g. from an on_end callback."""
        self.say(note=note)

    # ----- control ----------------------------------------------------------------------------
    def wait(self, timeout: float | None = None, pictures: bool = False) -> list[int | None]:
        """Exit codes of all tasks, chief first; None for any still running when `timeout` passed. The run is done
        when its tasks have ended; `pictures=True` also waits (within the timeout) for what views go on drawing
        (`after_end`: kwnb.launch's curves.png and timeline.png, then `curves_path`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._done.wait(timeout)
        for thread in list(self.after_end) if pictures and self.done else []:
            if thread is not threading.current_thread():
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.exit_codes

    def stop(self, reason: str = "stopped by the user") -> list[int | None]:
        """End every task (TERM, then KILL after a grace period) and wait for the run to close."""
        with self._control:
            if self.started_at is None and not self.done:  # never started: nothing to end, but it is over
                self.say(reason=reason)
                self._outcome, self.ended_at = Status.STOPPED, time.time()
                self._done.set()
            elif not self.done and not self._stopping:
                self.say(reason=reason)
                self.stop_all()
        return self.wait(timeout=self.stop_grace + 5)

    # ----- reading ----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def exit_codes(self) -> list[int | None]:
        return [task.returncode for task in self.workers]

    @property
    def status(self) -> Status:
        if self._outcome is not None:  # the run ended before its tasks could (a failed launch, a stop before start)
            return self._outcome
        ended = self.done or all(task.returncode is not None for task in self.workers)
        return roles.status(self.workers, self.timed_out, ended)

    @property
    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.ended_at or time.time()) - self.started_at

    @property
    def chief(self) -> Task:
        return self.workers[0]

    @property
    def warm(self) -> bool:
        """Every task of the latest launch started in a warm interpreter (TensorFlow already imported)."""
        return all(task.warm for task in self.workers)

    @property
    def curves_path(self) -> Path | None:
        """curves.png in the run folder, once a view has drawn it (at the end of the run)."""
        return self.folder.curves if self.folder.curves.is_file() else None

    def snapshot(self) -> RunSnapshot:
        """An immutable copy of what views show (engine/records/snapshot.py), taken under the state lock:
        render it holding no lock."""
        where = [task.where for task in self.workers]  # may read a file (a Slurm task's placement): not under the lock
        with self._lock:
            return snapshot_of_run(self, where)

    def summary(self) -> str:
        return format_summary(self.snapshot())

    def __repr__(self) -> str:
        return f"<kwnb Run {self.name!r} {self.status}, {len(self.workers)} tasks, {self.dir}>"
