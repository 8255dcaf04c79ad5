"""A run: one launch of a script on a cluster of tasks, watched from start to end.

One supervisor thread per run polls the tasks, applies the failure policy (policy.py) and, at the
end, calls the run's `on_end` callbacks (the views write summary.txt and curves.png there).
Everything a dashboard or terminal shows is read from here, so the notebook, the terminal and the
tests see the same run the same way.

Two locks, so that a view never waits for a process call:
- `_lock`, the state lock, guards what views read (each task's screen, metrics, status, exit code;
  the run's reason and notes). It is held only for in-memory updates.
- `_control`, the control lock, serialises what changes processes (launch, poll, stop, kill,
  restart, the failure policy). It may be held across slow calls (squeue, a stop's grace period);
  views never take it.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from ..backends import Launcher, TaskLaunch, make_launcher
from ..errors import NotPossible
from ..task.runfolder import (PARENT_PID_ENV, POSITION_ENV, RUN_DIR_ENV, RunFolder, default_runs_dir, new_run_dir,
                              write_description)
from . import cluster as clusters
from . import diagnose, policy
from .inputs import check_script, find_python, task_env
from .tensorboard import TensorBoardScalars
from . import stacks as stack_dumps
from .reading import RunReading
from .task import Task

POLL_SECONDS = 0.1
DIAGNOSE_SECONDS = 0.5  # findings are cheap, but need not be fresher than the dashboard's 4 redraws a second


class Run(RunReading):
    """A script running on a cluster. Start with `kwnb.launch()`; the notebook shows it as a dashboard."""

    def __init__(
        self,
        script: str | os.PathLike,
        n: int = 2,
        name: str | None = None,
        *,
        ps: int = 0,
        env: dict[str, str] | None = None,
        python: str | None = None,
        args: str | list[str] | None = None,
        timeout: float | None = None,
        on_failure: str = "stop",
        max_restarts: int = 3,
        failure_grace: float = 5.0,
        stop_grace: float = 3.0,
        gpus: bool = False,
        cwd: str | os.PathLike | None = None,
        runs_dir: str | os.PathLike | None = None,
        keep_lines: int = 300,
        launcher: Launcher | str = "local",
        network: str | None = None,
        warm: bool | None = None,
        files: list[str | os.PathLike] | None = None,
        on_end: list[Callable[["Run"], None]] | None = None,
        stall_after: float = 60.0,
        logdir: str | os.PathLike | None = None,
    ):
        self.cwd = Path(cwd or os.getcwd()).resolve()
        self.script = (self.cwd / script).resolve()
        self.name = name or self.script.stem
        self.task_ids = clusters.plan_tasks(n, ps=ps)
        check_script(self.script)
        self.python = find_python(python)
        self.args = shlex.split(args) if isinstance(args, str) else list(args or [])
        self.user_env = dict(env or {})
        policy.check_options(on_failure, timeout, stall_after)
        self.stall_after = stall_after  # seconds without progress before `stalled`; 0 turns it off
        # Where the tasks write TensorBoard event files, besides the run folder and the working directory.
        self.logdir = (self.cwd / logdir).resolve() if logdir else None
        self.timeout, self.on_failure, self.max_restarts = timeout, on_failure, max_restarts
        self.failure_grace, self.stop_grace, self.gpus = failure_grace, stop_grace, gpus
        self.launcher = make_launcher(launcher, network=network, warm=warm) if isinstance(launcher, str) else launcher
        self.launcher.check()
        self.dir = new_run_dir(Path(runs_dir) if runs_dir else default_runs_dir(self.cwd), self.name)
        self.folder = RunFolder(self.dir)
        self.files = self._keep_files(files or [])
        self.workers = self._make_tasks(keep_lines)
        self._write_description()
        self.on_end: list[Callable[[Run], None]] = list(on_end or [])  # called once, after every task ended
        self._init_progress()

    def _init_progress(self) -> None:
        """What changes while the run goes, and the locks that guard it (see the module's docstring)."""
        self.restarts = 0
        self.port_retries = 0
        self.reason = ""  # why the run ended early, in words
        self.notes: list[str] = []  # things the user should be told, e.g. a replaced run
        self.timed_out = False
        self.diagnoses: list[diagnose.Diagnosis] = []  # what kwnb found wrong, in one sentence each
        self.diagnosis_history: list[diagnose.Diagnosis] = []  # every one ever made, withdrawn ones too
        self._diagnosed_at = 0.0
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self._lock = threading.RLock()
        self._control = threading.RLock()
        self._done = threading.Event()
        self._stopping = False
        self._failed_at: float | None = None
        self._thread: threading.Thread | None = None

    def _keep_files(self, files: list) -> list[Path]:
        """What ran, even if the cells change later: the script and the job's helper modules, copied."""
        kept = [Path(f).resolve() for f in files]
        self.user_files = (str(self.script), *map(str, kept))  # whose frames a diagnosis names
        for path in [self.script, *kept]:
            if path.is_file():
                shutil.copy2(path, self.dir / path.name)
        return kept

    def _make_tasks(self, keep_lines: int) -> list[Task]:
        replicas = sum(task.type in ("chief", "worker") for task in self.task_ids)
        tasks = [Task(i, task_id, self.folder.log(task_id.type, task_id.index), self.folder.metrics(i), keep_lines,
                      step_scale=1.0 / replicas, user_files=self.user_files)
                 for i, task_id in enumerate(self.task_ids)]
        # Under ParameterServerStrategy the chief is the coordinator (the notebook), not a task here.
        tasks[0].is_chief = not any(task_id.type == "ps" for task_id in self.task_ids)
        for task in tasks:  # created private: logs can hold data and tracebacks
            os.close(os.open(task.log_path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600))
        return tasks

    @property
    def tasks(self) -> list[Task]:
        """Every task of the run, chief first; the same list as `workers` (which includes ps tasks too)."""
        return self.workers

    def _write_description(self) -> None:
        write_description(self.dir, {
            "name": self.name,
            "script": self.script.name,
            "args": self.args,
            "tasks": [{"type": task.type, "index": task.index} for task in self.task_ids],
            "env": self.user_env,  # may hold secrets: the file is private, like the run folder
            "files": [path.name for path in self.files if path.is_file()],
            "python": self.python,
            "cwd": str(self.cwd),
            "backend": self.launcher.name,
            "gpus": self.gpus,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        })

    # ----- life cycle -------------------------------------------------------------------------
    def start(self) -> "Run":
        self.started_at = time.time()
        replicas = sum(task.type in ("chief", "worker") for task in self.task_ids)
        self._tensorboard = TensorBoardScalars([self.dir, self.cwd, self.logdir], self.started_at,
                                               batch_scale=1.0 / replicas)
        try:
            with self._control:
                self._launch_all()
        except BaseException as error:  # e.g. a job the scheduler rejected: the run is over before it began
            self._stop_all()
            self.reason, self.ended_at = f"could not start: {error}", time.time()
            self._done.set()
            raise
        self.notes.extend(self.launcher.take_notes())  # now, so the magic prints them as the run starts
        self._thread = threading.Thread(target=self._supervise, name=f"kwnb-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _launch_all(self) -> None:
        addresses = self.launcher.addresses(self.task_ids)
        cluster = clusters.cluster_spec(self.task_ids, addresses) if addresses is not None else None
        configs = [clusters.tf_config(cluster, task.id) if cluster else {} for task in self.workers]
        launches = [self._launch_of(task, config) for task, config in zip(self.workers, configs)]
        processes = self.launcher.start_all(launches)
        with self._lock:
            for task, process, config in zip(self.workers, processes, configs):
                task._started(process, config)

    def _launch_of(self, task: Task, config: dict) -> TaskLaunch:
        for stale in (self.folder.stacks(task.position), self.folder.tf_config_set(task.position)):
            stale.unlink(missing_ok=True)  # the last attempt's: its stacks file also says "ready for signals"
        return TaskLaunch(task.id, self.python, str(self.script), self.args, self._env(task, config), str(self.cwd),
                          task.log_path)

    def _env(self, task: Task, config: dict) -> dict[str, str]:
        env = task_env(self.gpus)
        env.update({PARENT_PID_ENV: str(os.getpid()), RUN_DIR_ENV: str(self.dir), POSITION_ENV: str(task.position)})
        if config:  # else the task builds it where it runs (a batch scheduler's launcher)
            env["TF_CONFIG"] = json.dumps(config)
        env.update(self.user_env)
        return env

    def _supervise(self) -> None:
        try:
            while True:
                with self._control:
                    self._refresh()
                    self._diagnose()
                    policy.apply(self)
                    if all(task.returncode is not None for task in self.workers):
                        break
                time.sleep(POLL_SECONDS)
        finally:
            with self._control:
                self._refresh()
                self._diagnose(final=True)
            self.ended_at = time.time()
            self._finish()

    def _refresh(self) -> bool:
        """Observe every task (slow, no state lock), then apply what was seen (quick, under it)."""
        seen = [task.observe() for task in self.workers]
        # TensorBoard scalars (engine/tensorboard.py) are the chief's curves too; a last look at the end.
        epochs, steps = self._tensorboard.poll_safely(self.notes, rescan=all(t.returncode is not None for t in self.workers))
        with self._lock:
            changed = any([task.apply(observation) for task, observation in zip(self.workers, seen)])
            if epochs or steps:
                self.chief.metrics.feed_rows(epochs, steps, steps_per_epoch=self._tensorboard.steps_per_epoch)
            return changed or bool(epochs or steps)

    def _diagnose(self, final: bool = False, now_please: bool = False) -> None:
        # Once kwnb is ending the run, what held until then stays said (a stop must not erase "stalled").
        final = final or self._stopping
        now = time.time()
        if final or now_please or now - self._diagnosed_at >= DIAGNOSE_SECONDS:
            self._diagnosed_at = now
            found = diagnose.findings(self, now)  # outside the state lock: it may ask tasks for their stacks
            with self._lock:
                diagnose.merge(self, found, now, final=final)

    def _stop_all(self, count_as_stop: bool = True) -> None:
        self._stopping = count_as_stop
        stoppers = [threading.Thread(target=task._stop, args=(self.stop_grace,)) for task in self.workers]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        self._refresh()

    def _relaunch_all(self, why: str) -> None:
        for task in self.workers:
            _log_separator(task, why)
        self._failed_at = None
        self._launch_all()

    def _finish(self) -> None:
        self.notes.extend(self.launcher.finish())
        for callback in self.on_end:
            try:
                callback(self)
            except Exception as error:  # what a view writes is a bonus; a broken one must not hide the result
                self.notes.append(f"{getattr(callback, '__name__', 'an on_end callback')} failed: {error}")
        self._done.set()

    # ----- control ----------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> list[int | None]:
        """Exit codes of all tasks, chief first; None for any still running when `timeout` passed."""
        self._done.wait(timeout)
        return self.exit_codes

    def stop(self, reason: str = "stopped by the user") -> list[int | None]:
        """End every task (TERM, then KILL after a grace period) and wait for the run to close."""
        with self._control:
            if not self.done and not self._stopping:
                self.reason = reason
                self._stop_all()
        return self.wait(timeout=self.stop_grace + 5)

    def kill(self, task: int | str) -> None:
        """SIGKILL one task, as a preempted machine: the failure policy then decides what follows."""
        chosen = self.task(task)
        self._check_single_task_control("kill")
        with self._control:
            chosen._kill()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until every task's port accepts connections (its TensorFlow server is up).

        For a coordinator in the notebook (ParameterServerStrategy), which must not connect first.
        False if `timeout` passed or the run ended before that.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not all(task.port_open_at for task in self.workers):
            if self.done or (deadline is not None and time.monotonic() > deadline):
                return False
            time.sleep(POLL_SECONDS)
        return True

    def restart(self, task: int | str) -> None:
        """Start one task again with the same TF_CONFIG, as a replaced machine rejoining the cluster."""
        chosen = self.task(task)
        self._check_single_task_control("restart")
        with self._control:
            if self.done:
                raise NotPossible(f"run {self.name!r} has ended; launch it again instead")
            chosen._stop(self.stop_grace)
            self._refresh()
            _log_separator(chosen, f"{chosen.id} restarted by the user")
            process = self.launcher.start(self._launch_of(chosen, chosen.tf_config))
            with self._lock:
                chosen.restarts += 1
                self.restarts += 1
                chosen._started(process, chosen.tf_config)
                self._failed_at = None

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

    # ----- reading ----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def exit_codes(self) -> list[int | None]:
        return [task.returncode for task in self.workers]

    @property
    def status(self) -> str:
        statuses = [task.status for task in self.workers]
        if not self.done and not all(task.returncode is not None for task in self.workers):
            if all(s in ("starting", "pending") for s in statuses):
                return "pending" if "pending" in statuses else "starting"
            return "running"
        if "failed" in statuses or self.timed_out:
            return "failed"
        if "stopped" in statuses:
            return "stopped"
        return "finished"

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

    def summary(self) -> str:
        from .summary import format_summary

        return format_summary(self)

    def __repr__(self) -> str:
        return f"<kwnb Run {self.name!r} {self.status}, {len(self.workers)} tasks, {self.dir}>"


def _log_separator(task: Task, why: str) -> None:
    """Logs are appended across restarts, with a line that shows where each attempt begins."""
    with open(task.log_path, "ab") as log:
        log.write(f"\n===== kwnb: {why} =====\n".encode())
