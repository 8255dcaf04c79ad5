"""A run: one launch of a script on a cluster of tasks, watched from start to end.

One supervisor thread per run polls the processes, reads new log bytes, applies the failure
policy and, at the end, saves the curves. Everything a dashboard or terminal shows is read from
here, so the notebook, the terminal and the tests see the same run the same way.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

from . import cluster as clusters
from .follow import FileFollower
from .launchers import Launcher, TaskLaunch, TaskProcess, make_launcher
from .metrics import MetricsParser
from .report import RUN_DIR_ENV, WORKER_ENV, metrics_path
from .terminal import TerminalScreen

POLL_SECONDS = 0.1
ON_FAILURE = ("stop", "keep", "restart")
PORT_RETRIES = 3
# What TensorFlow prints when its port was taken between kwnb choosing it and the worker binding it.
BIND_FAILURE = "Could not start gRPC server"


class Worker:
    """One task's process across restarts, with its log and what was read from it."""

    def __init__(self, position: int, task: clusters.Task, log_path: Path, reports_path: Path, keep_lines: int,
                 step_scale: float = 1.0):
        self.position = position  # place in Run.workers; the chief is 0
        self.index = task.index
        self.task_type = task.type
        self.task = task
        self.log_path = log_path
        self.tf_config: dict = {}
        self.pid: int | None = None
        self.returncode: int | None = None
        self.status = "starting"
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.port_open_at: float | None = None
        self.restarts = 0
        self.screen = TerminalScreen(keep=keep_lines)
        self.metrics = MetricsParser(step_scale=step_scale)
        self._log = FileFollower(log_path)
        self._reports = FileFollower(reports_path)
        self._process: TaskProcess | None = None
        self._stop_requested = False
        self.bind_failed = False
        self.is_chief = False

    @property
    def address(self) -> str:
        """host:port, or "" while a scheduler has not yet placed the task."""
        return clusters.address_of(self.tf_config["cluster"], self.task) if self.tf_config else ""

    @property
    def where(self) -> str:
        """Where the task runs, in words: a pid here, a job and node under a scheduler."""
        return self._process.where() if self._process is not None else ""

    @property
    def alive(self) -> bool:
        return self._process is not None and self.returncode is None

    @property
    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.ended_at or time.time()) - self.started_at

    def _started(self, process: TaskProcess, tf_config: dict) -> None:
        self._process, self.tf_config, self.pid = process, tf_config, process.pid
        self.returncode, self.ended_at, self.port_open_at = None, None, None
        self.status, self.started_at, self._stop_requested = "starting", time.time(), False
        self.bind_failed = False

    def _read_output(self) -> bool:
        text = self._log.read_new()
        if text:
            self.screen.feed(text)
            self.metrics.feed(text)
            self.bind_failed = self.bind_failed or BIND_FAILURE in text
        reported = self._reports.read_new()
        if reported:
            self.metrics.feed_report_lines(reported)
        return bool(text or reported)

    def _poll(self) -> bool:
        """Read what is new; returns whether anything changed."""
        changed = self._read_output()
        if self._process is None or self.returncode is not None:
            return changed
        code = self._process.poll()
        if code is not None:
            while self._read_output():  # to the end: a read takes at most MAX_READ bytes
                pass
            self.returncode, self.ended_at = code, time.time()
            self.status = "stopped" if self._stop_requested else ("finished" if code == 0 else "failed")
            return True
        if not self.tf_config:
            self.tf_config = self._process.tf_config() or {}
            changed = changed or bool(self.tf_config)
        queued = self._process.queued()
        if queued != (self.status == "pending") and self.status in ("starting", "pending"):
            self.status, changed = ("pending" if queued else "starting"), True
        listening = self._port_accepts()
        if self.status in ("starting", "pending") and (listening or self.screen.total_lines):
            self.status = "running"
            changed = True
        return changed

    def _port_accepts(self) -> bool:
        if not self.tf_config:
            return False
        if self.port_open_at is None:
            host, _, port = self.address.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=0.05):
                    self.port_open_at = time.time()
            except OSError:
                return False
        return True

    def _stop(self, grace: float) -> None:
        if self._process is not None and self.returncode is None:
            self._stop_requested = True
        if self._process is not None:
            self._process.stop(grace)

    def _kill(self) -> None:
        """SIGKILL, as a preempted machine would die: counts as a failure, not a stop."""
        if self._process is not None:
            self._process.signal(9)

    def __repr__(self) -> str:
        code = "" if self.returncode is None else f" exit {self.returncode}"
        return f"<Worker {self.task_type} {self.index} pid={self.pid} {self.status}{code}>"


class Run:
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
        files: list[str | os.PathLike] | None = None,
    ):
        self.cwd = Path(cwd or os.getcwd()).resolve()
        self.script = (self.cwd / script).resolve()
        self.name = name or self.script.stem
        self.tasks = clusters.plan_tasks(n, ps=ps)
        _check_script(self.script)
        self.python = _find_python(python)
        self.args = shlex.split(args) if isinstance(args, str) else list(args or [])
        self.user_env = dict(env or {})
        if on_failure not in ON_FAILURE:
            raise ValueError(f"on_failure must be one of {', '.join(ON_FAILURE)}, not {on_failure!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout}")
        self.timeout, self.on_failure, self.max_restarts = timeout, on_failure, max_restarts
        self.failure_grace, self.stop_grace, self.gpus = failure_grace, stop_grace, gpus
        self.launcher = make_launcher(launcher) if isinstance(launcher, str) else launcher
        self.launcher.check()
        self.dir = _new_run_dir(Path(runs_dir or os.environ.get("KWNB_RUNS_DIR") or self.cwd / ".kwnb" / "runs"), self.name)
        # What ran, even if the cells change later: the script and the helper modules of the job.
        self.files = [Path(f).resolve() for f in files or []]
        for path in [self.script, *self.files]:
            if path.is_file():
                shutil.copy2(path, self.dir / path.name)
        replicas = sum(task.type in ("chief", "worker") for task in self.tasks)
        self.workers = [
            Worker(i, task, self.dir / f"{task.type}-{task.index}.log", metrics_path(self.dir, i), keep_lines,
                   step_scale=1.0 / replicas)
            for i, task in enumerate(self.tasks)
        ]
        # Under ParameterServerStrategy the chief is the coordinator (the notebook), not a task here.
        self.workers[0].is_chief = not any(task.type == "ps" for task in self.tasks)
        for worker in self.workers:  # created private: logs can hold data and tracebacks
            os.close(os.open(worker.log_path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600))
        self._write_description()
        self.restarts = 0
        self.port_retries = 0
        self.reason = ""  # why the run ended early, in words
        self.notes: list[str] = []  # things the user should be told, e.g. a replaced run
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.curves_path: Path | None = None
        self.version = 0  # bumped on every visible change; views redraw when it moves
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._stopping = False
        self._failed_at: float | None = None
        self._thread: threading.Thread | None = None

    def _write_description(self) -> None:
        """run.json: what was launched, so a run folder can be exported or launched again later."""
        description = {
            "name": self.name,
            "script": self.script.name,
            "args": self.args,
            "tasks": [{"type": task.type, "index": task.index} for task in self.tasks],
            "env": self.user_env,  # may hold secrets: the file is private, like the run folder
            "files": [path.name for path in self.files if path.is_file()],
            "python": self.python,
            "cwd": str(self.cwd),
            "backend": self.launcher.name,
            "gpus": self.gpus,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        path = self.dir / "run.json"
        with os.fdopen(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600), "w") as handle:
            json.dump(description, handle, indent=2)
            handle.write("\n")

    # ----- life cycle -------------------------------------------------------------------------
    def start(self) -> "Run":
        self.started_at = time.time()
        try:
            self._launch_all()
        except BaseException as error:  # e.g. a job the scheduler rejected: the run is over before it began
            self._stop_all()
            self.reason, self.ended_at = f"could not start: {error}", time.time()
            self._done.set()
            raise
        self._thread = threading.Thread(target=self._supervise, name=f"kwnb-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _launch_all(self) -> None:
        addresses = self.launcher.addresses(self.tasks)
        cluster = clusters.cluster_spec(self.tasks, addresses) if addresses is not None else None
        configs = [clusters.tf_config(cluster, w.task) if cluster else {} for w in self.workers]
        launches = [TaskLaunch(worker.task, self.python, str(self.script), self.args,
                               self._env(worker, config), str(self.cwd), worker.log_path)
                    for worker, config in zip(self.workers, configs)]
        for worker, process, config in zip(self.workers, self.launcher.start_all(launches), configs):
            worker._started(process, config)
        self.version += 1

    def _env(self, worker: Worker, config: dict) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            TF_USE_LEGACY_KERAS="1",  # Keras 3 cannot run MultiWorkerMirroredStrategy; tf-keras can
            PYTHONUNBUFFERED="1",
            MPLBACKEND="Agg",  # the kernel's inline backend means nothing in a worker
            KWNB_PARENT_PID=str(os.getpid()),
            **{RUN_DIR_ENV: str(self.dir), WORKER_ENV: str(worker.position)},
        )
        if config:  # else the task builds it where it runs (a batch scheduler's launcher)
            env["TF_CONFIG"] = json.dumps(config)
        if not self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = "-1"  # N workers on one GPU would fight over its memory
        env.update(self.user_env)
        return env

    def _supervise(self) -> None:
        try:
            while True:
                with self._lock:
                    changed = any([worker._poll() for worker in self.workers])
                    self._apply_policy()
                    if changed:
                        self.version += 1
                    if all(w.returncode is not None for w in self.workers):
                        break
                time.sleep(POLL_SECONDS)
        finally:
            with self._lock:
                for worker in self.workers:
                    worker._poll()
                self.ended_at = time.time()
            self._finish()

    def _apply_policy(self) -> None:
        now = time.time()
        if self.timeout and not self._stopping and now - self.started_at > self.timeout:
            self.reason = f"timed out after {self.timeout:g} s"
            self._stop_all()
            return
        failed = [w for w in self.workers if w.status == "failed"]
        if not failed or self._stopping:
            return
        alive = [w for w in self.workers if w.alive]
        clashed = [w for w in failed if w.bind_failed]
        if clashed and self.port_retries < PORT_RETRIES:
            self.port_retries += 1
            self.notes.append(f"{clashed[0].task} could not bind {clashed[0].address} (taken after it was chosen); "
                              f"relaunched the cluster on new ports")
            self._stop_all(count_as_stop=False)
            self._relaunch_all(f"port {clashed[0].address} was taken; new ports, try {self.port_retries + 1}")
            return
        if self.on_failure == "restart" and self.restarts < self.max_restarts:
            first = failed[0]
            self._stop_all(count_as_stop=False)
            self.restarts += 1
            for worker in self.workers:
                worker.restarts = self.restarts
            self._relaunch_all(f"restart {self.restarts} of the cluster: {first.task} exited with {first.returncode}")
            return
        if not alive:
            self.reason = self.reason or f"{failed[0].task} failed with exit code {failed[0].returncode}"
            return
        if self.on_failure == "keep":
            return
        # MultiWorkerMirroredStrategy peers block forever in collectives once a peer is gone.
        self._failed_at = self._failed_at or now
        if now - self._failed_at >= self.failure_grace:
            self.reason = (f"{failed[0].task} failed with exit code {failed[0].returncode}; "
                           f"stopped the others after {self.failure_grace:g} s")
            self._stop_all()

    def _stop_all(self, count_as_stop: bool = True) -> None:
        self._stopping = count_as_stop
        stoppers = [threading.Thread(target=w._stop, args=(self.stop_grace,)) for w in self.workers]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        for worker in self.workers:
            worker._poll()

    def _relaunch_all(self, why: str) -> None:
        for worker in self.workers:
            _log_separator(worker, why)
        self._failed_at = None
        self._launch_all()

    def _finish(self) -> None:
        self.notes.extend(self.launcher.finish())
        try:
            from .plotting import save_curves

            self.curves_path = save_curves(self, self.dir / "curves.png")
        except Exception as error:  # curves are a bonus; a broken plot must not hide the result
            self.notes.append(f"could not save curves: {error}")
        from .summary import format_summary

        (self.dir / "summary.txt").write_text(format_summary(self) + "\n")
        self.version += 1
        self._done.set()

    # ----- control ----------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> list[int | None]:
        """Exit codes of all tasks, chief first; None for any still running when `timeout` passed."""
        self._done.wait(timeout)
        return self.exit_codes

    def stop(self, reason: str = "stopped by the user") -> list[int | None]:
        """End every task (TERM, then KILL after a grace period) and wait for the run to close."""
        with self._lock:
            if not self.done and not self._stopping:
                self.reason = reason
                self._stop_all()
        return self.wait(timeout=self.stop_grace + 5)

    def kill(self, position: int) -> None:
        """SIGKILL one task, as a preempted machine: the failure policy then decides what follows."""
        worker = self.worker(position)
        self._check_single_task_control("kill")
        worker._kill()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until every task's port accepts connections (its TensorFlow server is up).

        For a coordinator in the notebook (ParameterServerStrategy), which must not connect first.
        False if `timeout` passed or the run ended before that.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not all(w.port_open_at for w in self.workers):
            if self.done or (deadline is not None and time.monotonic() > deadline):
                return False
            time.sleep(POLL_SECONDS)
        return True

    def restart(self, position: int) -> None:
        """Start one task again with the same TF_CONFIG, as a replaced machine rejoining the cluster."""
        worker = self.worker(position)
        self._check_single_task_control("restart")
        with self._lock:
            if self.done:
                raise RuntimeError(f"run {self.name!r} has ended; launch it again instead")
            worker._stop(self.stop_grace)
            worker._poll()
            worker.restarts += 1
            self.restarts += 1
            _log_separator(worker, f"{worker.task} restarted by the user")
            launch = TaskLaunch(worker.task, self.python, str(self.script), self.args,
                                self._env(worker, worker.tf_config), str(self.cwd), worker.log_path)
            worker._started(self.launcher.start(launch), worker.tf_config)
            self._failed_at = None
            self.version += 1

    def _check_single_task_control(self, action: str) -> None:
        if not self.launcher.controls_single_tasks:
            raise RuntimeError(f"cannot {action} one task under --backend {self.launcher.name}: kwnb can only "
                               f"signal the whole job there (%kw_stop {self.name} stops it)")

    # ----- reading ----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def exit_codes(self) -> list[int | None]:
        return [w.returncode for w in self.workers]

    @property
    def status(self) -> str:
        statuses = [w.status for w in self.workers]
        if not self.done and not all(w.returncode is not None for w in self.workers):
            if all(s in ("starting", "pending") for s in statuses):
                return "pending" if "pending" in statuses else "starting"
            return "running"
        if "failed" in statuses or (self.reason.startswith("timed out")):
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
    def chief(self) -> Worker:
        return self.workers[0]

    def worker(self, position: int) -> Worker:
        if not isinstance(position, int) or not 0 <= position < len(self.workers):
            raise IndexError(f"run {self.name!r} has tasks 0 to {len(self.workers) - 1}, not {position!r}")
        return self.workers[position]

    def history(self, index: int = 0) -> list[dict]:
        """Per-epoch rows of one task (the chief by default): {'epoch': 0, 'loss': ..., ...}."""
        with self._lock:
            return [dict(row) for row in self.worker(index).metrics.history()]

    def step_history(self, index: int = 0) -> list[dict]:
        """Per-step rows where the output gives them (Keras verbose=1, or kwnb.report(step=...))."""
        with self._lock:
            return [dict(row) for row in self.worker(index).metrics.steps]

    def logs(self, index: int = 0, tail: int | None = None) -> str:
        """A task's log as a terminal shows it; `tail` keeps only the last lines."""
        from .terminal import TerminalScreen

        screen = TerminalScreen(keep=tail or 10**9)
        with open(self.worker(index).log_path, "rb") as log:
            screen.feed(log.read().decode("utf-8", errors="replace"))
        return "\n".join(screen.tail(tail))

    def summary(self) -> str:
        from .summary import format_summary

        return format_summary(self)

    def __repr__(self) -> str:
        return f"<kwnb Run {self.name!r} {self.status}, {len(self.workers)} tasks, {self.dir}>"


def _log_separator(worker: Worker, why: str) -> None:
    """Logs are appended across restarts, with a line that shows where each attempt begins."""
    with open(worker.log_path, "ab") as log:
        log.write(f"\n===== kwnb: {why} =====\n".encode())


def _check_script(script: Path) -> None:
    if script.is_dir():
        raise ValueError(f"{script} is a directory, not a Python script")
    if not script.is_file():
        raise ValueError(f"no script at {script}")
    source = script.read_text(encoding="utf-8", errors="replace")
    if not source.strip():
        raise ValueError(f"{script.name} is empty: there is nothing to run")
    try:
        compile(source, str(script), "exec")
    except SyntaxError as error:
        raise ValueError(f"{script.name} line {error.lineno}: SyntaxError: {error.msg}") from None


def _find_python(python: str | None) -> str:
    if not python:
        return sys.executable
    found = shutil.which(python)
    if not found:
        raise ValueError(f"Python interpreter not found: {python}")
    return found


def _new_run_dir(runs_dir: Path, name: str) -> Path:
    runs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(1000):
        path = runs_dir / (f"{name}-{stamp}" + (f"-{attempt}" if attempt else ""))
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a run folder in {runs_dir}")
