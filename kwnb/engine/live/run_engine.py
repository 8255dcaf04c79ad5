"""The engine's side of a run: its tasks, launcher, folder and log, what changes while it goes, and the two
locks that guard it. The supervisor (supervisor.py), the task controls (control.py) and kwnb's own end-of-run
code work on it; the learner's Run (run.py) holds it privately and shows only the learner's verbs and values.

Two locks, so that a view never waits for a process call; each field below says which one guards it:
- `state_lock` guards what views read (each task's screen, metrics, status, exit code; the run's reason,
  notes, diagnoses and counts). It is held only for in-memory updates; the reason and notes are written by
  `say` alone, the diagnoses by `apply_findings` alone.
- `control_lock` serialises what changes processes (launch, poll, stop, kill, restart, carrying out the failure
  policy's decisions) and guards what only those steps read and write (`stopping`, `failed_at`, the
  TensorBoard reader, the sidecars). It may be held across slow calls (squeue, a stop's grace period); views
  never take it. A thread that holds both took `control_lock` first.
Fields marked "fixed" are set while the run is made and never change: no lock.

A launch is all or nothing: if one task cannot start, those started are stopped, the launcher is
finished and the run ends with the error as its reason (its traceback in kwnb.log, engine/live/log.py).
"""
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

from ...backends import Launcher, TaskLaunch, make_launcher
from ...errors import KwnbError, LaunchError, NotPossible
from ...task.runfolder import RunFolder, default_runs_dir, new_run_dir
from . import cluster as clusters
from ..diagnoses import diagnose, saves
from ..diagnoses.diagnosis import Diagnosis
from ..tasks import roles
from .after_end import AfterEnd
from .log import LOG_NAME, for_run
from ...machine.task_env import TaskFacts, framework_named, plan_gpus, task_environment
from .cpu_devices_hint import cpu_devices_hint
from .framework_hint import framework_hint
from .inputs import check_script, find_python
from ..readers import program
from ..readers.metrics import unsummed_note
from ..readers.tensorboard import TensorBoardScalars
from ..tasks.status import Status
from .settings import LaunchSettings
from ..records.record import record_description, record_result
from ..records.snapshot import RunSnapshot, snapshot_of_run
from ..tasks.task import Task


class RunEngine:
    """One run as kwnb drives it: made from a script and its LaunchSettings, started once, ended by its supervisor."""

    def __init__(self, script: str | os.PathLike, settings: LaunchSettings):
        self.settings = settings  # fixed: every launch option; the failure policy's are read from here
        self.cwd = Path(settings.cwd or os.getcwd()).resolve()  # fixed, as are the names below up to `launcher`
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
        # where the tasks write event files, if not under cwd (engine/readers/tensorboard.py)
        self.logdir = (self.cwd / settings.logdir).resolve() if settings.logdir else None
        self.gpus = settings.gpus
        self.framework = framework_named(settings.framework)  # fixed: whose variables each task gets
        launcher = settings.launcher
        self.launcher: Launcher = make_launcher(launcher, network=settings.network, warm=settings.warm) \
            if isinstance(launcher, str) else launcher
        self.launcher.check()
        self._make_folder(settings.runs_dir, settings.files, settings.keep_lines, tuple(settings.outputs or ()))
        self.sidecars = roles.Sidecars(self.workers, settings.evaluator_grace)  # control_lock
        # Fixed: called once, by the supervisor, after every task ended, with the learner's Run; record_result
        # writes how the run went into run.json (engine/records/record.py).
        self.on_end: list[Callable] = [*(settings.on_end or []), record_result]
        self._init_progress()
        # Fixed: each task's GPUs, when --gpus starts them on this machine (a scheduler places its own).
        placed_here = settings.gpus and self.launcher.runs_here
        self.gpu_placement, note = plan_gpus(len(self.workers), self.user_env, self.framework) if placed_here else (None, "")
        self.say(note=note)
        self.say(note=framework_hint(self.script, self.framework.name, {**os.environ, **self.user_env}))
        task_env = task_environment(TaskFacts(gpus=bool(self.gpus), framework=self.framework), self.user_env)
        self.say(note=cpu_devices_hint(self.script, self.framework.name, len(self.workers), task_env, self.user_env))

    def _make_folder(self, runs_dir, files, keep_lines: int, outputs: tuple) -> None:
        """The run's folder: its log (kwnb.log), the job's files, a log per task, and run.json (all fixed)."""
        self.dir = new_run_dir(Path(runs_dir) if runs_dir else default_runs_dir(self.cwd), self.name)
        self.folder = RunFolder(self.dir)
        self.log = for_run(self.dir)  # kwnb's own account of the run: kwnb.log in its folder
        self.files = self._keep_files(files or [])
        self.workers = self._make_tasks(keep_lines, outputs)  # each task's state: state_lock; its process: control_lock
        self._write_description()

    def _init_progress(self) -> None:
        """What changes while the run goes, and the lock that guards each (see the module's docstring)."""
        self.state_lock = threading.RLock()
        self.control_lock = threading.RLock()
        self.cluster: dict | None = None  # state_lock: the latest launch's cluster spec, where kwnb placed the tasks
        self.restarts = 0  # state_lock: cluster restarts by the failure policy: what --max-restarts limits
        self.user_restarts = 0  # state_lock: tasks restarted by the user (%kw_restart, Run.restart): not limited
        self.port_retries = 0  # state_lock
        self.timed_out = False  # state_lock
        self.reason = ""  # state_lock, written by `say`: why the run ended early, in words
        self.notes: list[str] = []  # state_lock, written by `say`: things the user should be told
        self.diagnoses: list[Diagnosis] = []  # state_lock, written by `apply_findings`: one sentence each
        self.diagnosis_history: list[Diagnosis] = []  # state_lock, by `apply_findings`: withdrawn ones too
        self.outcome: Status | None = None  # state_lock: set if the run ended before its tasks could (a failed launch)
        self.failed_by_findings: tuple[int, ...] = ()  # state_lock: tasks the failure policy ended the run for, exit 0
        self.started_at: float | None = None  # set once by `start`, before the supervisor's thread starts
        self.ended_at: float | None = None  # state_lock: set once, at the end, before the on_end callbacks
        self.ended = threading.Event()  # set once, last: nothing may wait for the run any longer
        self.stopping = False  # control_lock: kwnb is ending the run (a stop, a timeout, the policy; not a relaunch)
        self.failed_at: float | None = None  # control_lock: a failure first seen since the last (re)launch or restart
        self.tensorboard: TensorBoardScalars | None = None  # control_lock: made by `start`, read by `refresh`
        self._writer_pids: set[int] = set()  # control_lock: the tasks' processes seen (TensorBoard's writers)
        # What the on_end callbacks go on doing after the end (`go_on`, in the supervisor's thread before `ended`
        # is set): wait(pictures=True) joins them.
        self.after_end: list[threading.Thread] = []

    def _keep_files(self, files: list) -> list[Path]:
        """What ran, even if the cells change later: the script and the job's helper modules, copied."""
        kept = [Path(f).resolve() for f in files]
        self.user_files = (str(self.script), *map(str, kept))  # fixed: whose frames a diagnosis names
        self.hand_sharding: tuple = ()  # fixed: where those files shard a dataset after batching it
        self.saves: tuple = ()  # fixed: the script's saves to one literal path
        for path in [self.script, *kept]:
            if path.is_file():
                shutil.copy2(path, self.dir / path.name)
                is_script = path == self.script
                text = _text(self.dir / path.name) if path.suffix == ".py" or is_script else ""  # once, for both readers
                if path.suffix == ".py":
                    self.hand_sharding += program.hand_sharding(str(path), text)
                if is_script:
                    self.saves = saves.literal_saves(path, text)
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
    def start(self) -> None:
        """Start every task, or none and raise; the caller then starts the supervisor's thread."""
        if self.started_at is not None or self.done:
            raise NotPossible(f"run {self.name!r} was started or stopped already; launch it again instead")
        self.started_at = time.time()
        replicas = sum(task.type in ("chief", "worker") for task in self.task_ids)
        self.tensorboard = TensorBoardScalars([self.dir, self.cwd, self.logdir], self.started_at,
                                              batch_scale=1.0 / replicas,
                                              writers=self._writers if self.launcher.name == "local" else None)
        try:
            with self.control_lock:
                self.launch_all()
        except BaseException as error:  # e.g. a job the scheduler rejected: the run is over before it began
            self._launch_failed(error)
            if isinstance(error, KwnbError) or not isinstance(error, Exception):
                raise
            raise LaunchError(f"could not start run {self.name!r}: {type(error).__name__}: {error} "
                              f"(details in {self.dir / LOG_NAME})") from error
        for note in self.launcher.take_notes():  # now, so the magic prints them as the run starts
            self.say(note=note)
        self.log.info("started %d tasks with %s", len(self.workers), self.launcher.name)

    def _launch_failed(self, error: BaseException) -> None:
        """All or nothing: the tasks that started are stopped (start_all stops its own), the launcher is
        finished (which releases the warm pool) and the run ends, failed, with the error as its reason."""
        try:
            self.log.error("the launch failed; stopping what started", exc_info=error)
            self.fail(f"could not start: {error}")
            with self.control_lock:
                guarded(self, "stopping the tasks", self.stop_all)
            guarded(self, "finishing the launcher", self.finish_launcher)
        finally:
            with self.state_lock:
                self.ended_at = time.time()
            self.ended.set()

    def launch_all(self) -> None:
        """Every task, on the cluster's addresses of this launch (under the control lock)."""
        members = self.task_ids + ([self.coordinator] if self.coordinator else [])
        addresses = self.launcher.addresses(members)
        cluster = clusters.cluster_spec(members, addresses) if addresses is not None else None
        with self.state_lock:
            self.cluster = cluster
        configs = [clusters.tf_config(cluster, task.id) if cluster else {} for task in self.workers]
        launches = [self.launch_of(task, config) for task, config in zip(self.workers, configs)]
        processes = self.launcher.start_all(launches)  # all or none (backends/base.py)
        with self.state_lock:
            for task, process, config in zip(self.workers, processes, configs):
                task._started(process, config)

    def _writers(self) -> set[int]:
        """Every process of this run's tasks seen so far, their children included: who may write its event files
        (asked by the TensorBoard reader for each new event file this machine wrote)."""
        for task in [task for task in self.workers if task.pid]:
            self._writer_pids.add(task.pid)
            with contextlib.suppress(psutil.Error):  # ended: its children were added while it lived, if seen
                self._writer_pids.update(child.pid for child in psutil.Process(task.pid).children(recursive=True))
        return self._writer_pids

    def launch_of(self, task: Task, config: dict) -> TaskLaunch:
        for stale in (self.folder.stacks(task.position), self.folder.tf_config_set(task.position)):
            stale.unlink(missing_ok=True)  # the last attempt's: its stacks file also says "ready for signals"
        return TaskLaunch(task.id, self.python, str(self.script), self.args, self._env(task, config), str(self.cwd),
                          task.log_path)

    def _env(self, task: Task, config: dict) -> dict[str, str]:
        facts = TaskFacts(gpus=self.gpus, run_dir=str(self.dir), position=task.position, config=config,
                          placement=self.gpu_placement, framework=self.framework)
        return task_environment(facts, self.user_env)  # built in machine/task_env.py only

    # ----- what the supervisor does (engine/live/supervisor.py), under the control lock ----------
    def refresh(self) -> bool:
        """Observe every task (slow, no state lock), then apply what was seen (quick, under it)."""
        seen = [task.observe() for task in self.workers]
        # TensorBoard scalars (engine/readers/tensorboard.py) are the chief's curves too; a last look at the end.
        epochs, steps = self.tensorboard.poll_safely(lambda note: self.say(note=note),
                                                     rescan=all(t.returncode is not None for t in self.workers))
        with self.state_lock:
            changed = any([task.apply(observation) for task, observation in zip(self.workers, seen)])
            if epochs or steps:
                self.chief.metrics.feed_rows(epochs, steps, steps_per_epoch=self.tensorboard.steps_per_epoch)
            return changed or bool(epochs or steps)

    def end_sidecars(self) -> None:
        """Training is over: after their grace period, stop the sidecars (an evaluator) still running."""
        due = self.sidecars.due()
        if due:
            self.say(note=self.sidecars.stop(due, lambda task: task._stop(self.settings.stop_grace)))
            self.refresh()

    def stop_all(self, count_as_stop: bool = True) -> None:
        self.stopping = count_as_stop
        self.stop_tasks(self.workers)

    def stop_tasks(self, tasks: list[Task]) -> None:
        """TERM, then KILL after stop_grace, to every task at once (TensorFlow catches TERM), then a look."""
        grace = self.settings.stop_grace
        stoppers = [threading.Thread(target=guarded, args=(self, f"stopping {task.id}", task._stop, grace))
                    for task in tasks]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        self.refresh()

    def relaunch(self, why: str) -> None:
        """The same cluster again, `why` written into every task's log."""
        for task in self.workers:
            log_separator(task, why)
        self.launch_all()

    def say(self, note: str = "", reason: str = "", replace: bool = True) -> None:
        """The one writer of the run's notes and reason (under the state lock); both go to kwnb.log too."""
        with self.state_lock:
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
        with self.state_lock:
            self.outcome = Status.FAILED

    def apply_findings(self, found: list[Diagnosis], now: float, final: bool) -> None:
        """What a diagnosis pass found, merged into the diagnoses under the state lock (diagnose.merge)."""
        with self.state_lock:
            self.diagnoses, new = diagnose.merge(self.diagnoses, found, now, final=final)
            self.diagnosis_history.extend(new)

    def finish_launcher(self) -> None:
        for note in self.launcher.finish():  # e.g. Slurm's scancel of a job that outlived its tasks
            self.say(note=note)
        self.say(note=unsummed_note([task.metrics for task in self.workers]))

    def go_on(self, after: AfterEnd) -> None:
        """An on_end callback's work after the end, in a thread that is not a daemon: a script that exits right
        after wait() still gets it done (Python joins such threads before its atexit handlers)."""
        thread = threading.Thread(target=after.work, args=(lambda text: self.say(note=text),), name=after.name,
                                  daemon=False)
        self.after_end.append(thread)
        thread.start()

    def mark_ended(self) -> None:
        """The supervisor's last step: nothing may wait for this run any longer."""
        with self.state_lock:
            self.ended_at = self.ended_at or time.time()
        self.ended.set()

    # ----- what the learner's Run asks ------------------------------------------------------
    def stop(self, reason: str) -> list[int | None]:
        """End every task (TERM, then KILL after a grace period) and wait for the run to close."""
        with self.control_lock:
            if self.started_at is None and not self.done:  # never started: nothing to end, but it is over
                self.say(reason=reason)
                with self.state_lock:
                    self.outcome, self.ended_at = Status.STOPPED, time.time()
                self.ended.set()
            elif not self.done and not self.stopping:
                self.say(reason=reason)
                self.stop_all()
        return self.wait(timeout=self.settings.stop_grace + 5)

    def wait(self, timeout: float | None = None, pictures: bool = False) -> list[int | None]:
        """Exit codes once the tasks have ended (None for one still running after `timeout`); `pictures` also
        waits, within the timeout, for what the on_end callbacks go on doing (`after_end`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.ended.wait(timeout)
        for thread in list(self.after_end) if pictures and self.done else []:
            if thread is not threading.current_thread():
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.exit_codes

    @property
    def done(self) -> bool:
        return self.ended.is_set()

    @property
    def exit_codes(self) -> list[int | None]:
        return [task.returncode for task in self.workers]

    @property
    def status(self) -> Status:
        if self.outcome is not None:  # the run ended before its tasks could (a failed launch, a stop before start)
            return self.outcome
        ended = self.done or all(task.returncode is not None for task in self.workers)
        return roles.status(self.workers, self.timed_out, ended, self.failed_by_findings)

    @property
    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.ended_at or time.time()) - self.started_at

    @property
    def chief(self) -> Task:
        return self.workers[0]

    def snapshot(self) -> RunSnapshot:
        """An immutable copy of what views show (engine/records/snapshot.py), taken under the state lock:
        render it holding no lock."""
        where = [task.where for task in self.workers]  # may read a file (a Slurm task's placement): not under the lock
        with self.state_lock:
            return snapshot_of_run(self, where)


def log_separator(task: Task, why: str) -> None:
    """Logs are appended across restarts, with a line that shows where each attempt begins."""
    with open(task.log_path, "ab") as log:
        log.write(f"\n===== kwnb: {why} =====\n".encode())


def guarded(engine: RunEngine, what: str, step: Callable, *args):
    """An end-of-run step that must not keep the others from running: what it returns, or, if it fails,
    None and a note (its traceback goes to kwnb.log)."""
    try:
        return step(*args)
    except Exception as error:
        engine.log.error("%s failed", what, exc_info=error)
        engine.say(note=f"{what} failed: {error}")


def _text(path: Path) -> str:
    """A job file's source as the run's folder keeps it ("" where it cannot be read: then nothing is found)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
