"""Slurm: a run is one batch job with one task per kwnb task, followed without `sbatch --wait`.

`sbatch --wait` polls with a growing back-off (a 4 s job took 10 s to return here), so kwnb
submits, then follows the job itself: the tasks write their logs, TF_CONFIG and exit codes to
the run folder, which must be on a filesystem the nodes share (as home directories on clusters
are), and `squeue` says what the job is doing. Each task builds its TF_CONFIG from Slurm's
variables (kwnb/task/slurm_env.py), since only the task knows which nodes it got.
"""
from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ..errors import OptionError
from ..machine.task_env import PER_TASK
from ..task.runfolder import SLURM_HEARTBEAT_ENV, SLURM_PORT_BASE_ENV, SLURM_TASKS_ENV, STACKS_SIGNAL_NAME, RunFolder
from ..task.slurm_env import expand_ranges
from .base import BOOTSTRAP, Launcher, LaunchError, TaskLaunch, TaskProcess
from .catalog import SLURM_ARGUMENTS

COMMANDS = ("sbatch", "squeue", "scancel")
QUEUE_SECONDS = 1.0  # squeue asks the controller: once a second, shared by all tasks of a job
# Below Linux's ephemeral range (32768-60999), so outgoing connections on the nodes don't hold them.
PORT_RANGE = (20000, 32000)
FINISHED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
JOB_END_SECONDS = 10.0  # from the last task's exit to the job's end, before kwnb cancels it
EXIT_FILE_SECONDS = 3.0  # how long a shared filesystem may take to show a finished task's exit file


def available() -> tuple[bool, str]:
    """Whether Slurm can take jobs from here, and if not, why (for notebooks that fall back to local)."""
    missing = _missing((*COMMANDS, "sinfo"))
    if missing:
        return False, f"{', '.join(missing)} not found: Slurm's client commands are not installed here"
    try:
        result = subprocess.run(["sinfo", "-h", "-o", "%R %a %D"], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return False, "sinfo did not answer within 15 s: the Slurm controller is not reachable"
    if result.returncode != 0:
        return False, f"sinfo failed: {_slurm_message(result.stderr) or 'exit code %d' % result.returncode}"
    if not result.stdout.strip():
        return False, "Slurm has no partition"
    return True, "Slurm partitions: " + ", ".join(line.split()[0] for line in result.stdout.splitlines())


class SlurmLauncher(Launcher):
    """One `sbatch` job per launch: `srun` starts the tasks on the nodes Slurm gives."""

    name = "slurm"
    controls_single_tasks = False  # scancel reaches the job's tasks together
    arguments = SLURM_ARGUMENTS  # declared in catalog.py, so that listing options imports no backend

    def __init__(self, partition: str | None = None, nodes: int | None = None, time: str | None = None,
                 sbatch_args: list[str] | None = None):
        if nodes is not None and nodes < 1:
            raise OptionError(f"--nodes must be 1 or more, not {nodes}")
        self.partition, self.nodes, self.time = partition, nodes, time
        self.sbatch_args = list(sbatch_args or [])
        self.jobs: list[SlurmJob] = []

    def check(self) -> None:
        missing = _missing(COMMANDS)
        if missing:
            raise LaunchError(f"--backend slurm needs Slurm's {', '.join(missing)} on PATH, and "
                              f"{'it is' if len(missing) == 1 else 'they are'} not here: run kwnb where you "
                              f"submit jobs (a login node), or use --backend local")

    def addresses(self, tasks):
        return None  # only the tasks know which nodes they got: each builds TF_CONFIG itself

    def start(self, launch: TaskLaunch) -> TaskProcess:
        raise LaunchError("under Slurm kwnb starts or stops the whole job, not one task: "
                          "stop the run and launch it again")

    def start_all(self, launches: list[TaskLaunch]) -> list[TaskProcess]:
        folder = RunFolder(launches[0].log_path.parent)
        run_dir, heartbeat = folder.path, folder.heartbeat
        folder.clear_slurm_records()
        heartbeat.touch()
        env = _job_environment(launches[0].env)
        env[SLURM_TASKS_ENV] = json.dumps([{"type": l.task.type, "index": l.task.index, "log": str(l.log_path)}
                                           for l in launches])
        env[SLURM_PORT_BASE_ENV] = str(random.randrange(*PORT_RANGE))
        env[SLURM_HEARTBEAT_ENV] = str(heartbeat)
        first = launches[0]
        step = ["srun", "--distribution=block", "--kill-on-bad-exit=0",
                first.python, "-u", BOOTSTRAP, first.script, *first.args]
        options = [f"--job-name=kwnb-{run_dir.name}", f"--ntasks={len(launches)}",
                   f"--output={folder.slurm_output()}", f"--chdir={first.cwd}"]
        options += [f"--partition={self.partition}"] * bool(self.partition)
        options += [f"--nodes={self.nodes}"] * bool(self.nodes)
        options += [f"--time={self.time}"] * bool(self.time)
        options += self.sbatch_args
        script = folder.job_script
        script.write_text("#!/bin/sh\n"
                          f"# Submitted by kwnb: sbatch {shlex.join(options)} {script.name}\n"
                          "# Each task builds its TF_CONFIG from Slurm's variables (kwnb/task/slurm_env.py).\n"
                          f"exec {shlex.join(step)}\n")
        try:
            result = subprocess.run(["sbatch", "--parsable", *options, str(script)], env=env,
                                    capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            raise LaunchError("sbatch did not answer within 60 s: is the Slurm controller up?") from None
        if result.returncode != 0:
            raise LaunchError(self._rejection(result.stderr))
        job = SlurmJob(result.stdout.strip().split(";")[0], run_dir, heartbeat, len(launches))
        self.jobs.append(job)
        return [SlurmTask(job, position) for position in range(len(launches))]

    def _rejection(self, stderr: str) -> str:
        message = _slurm_message(stderr) or "sbatch failed without a message"
        if "partition" in message.lower():
            listed = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=15)
            names = sorted(set(listed.stdout.split())) if listed.returncode == 0 else []
            if names:
                message += f" (partition {self.partition!r}; this cluster has: {', '.join(names)})"
        return f"Slurm rejected the job: {message}"

    def finish(self) -> list[str]:
        """Every task has exited: make sure each job has ended too (a task can hang in interpreter shutdown)."""
        notes = []
        for job in self.jobs:
            deadline = time.monotonic() + JOB_END_SECONDS
            while job.finished_at is None and time.monotonic() < deadline:
                job.refresh()
                time.sleep(0.2)
            if job.finished_at is None:
                job.signal(signal.SIGKILL)
                notes.append(f"Slurm job {job.id} was still {job.state} {JOB_END_SECONDS:g} s after its tasks "
                             f"exited; cancelled it")
            notes.extend(job.notes())
        return notes


class SlurmJob:
    """What squeue says about one job, asked at most once a second whichever task polls."""

    def __init__(self, job_id: str, run_dir: Path, heartbeat: Path, size: int = 0):
        self.id, self.run_dir, self.heartbeat, self.size = job_id, run_dir, heartbeat, size
        self.state, self.reason, self.nodes = "PENDING", "", ""
        self.finished_at: float | None = None  # when squeue first showed the job over
        self.last_signal: int | None = None
        # {task: (exit code, when first seen)} from srun's reports in the job's output, which come as soon
        # as a task ends: a task killed on its node writes no exit file, and its job goes on.
        self.reported: dict[int, tuple[int, float]] = {}
        self._output_size = 0
        self._asked_at = float("-inf")
        self._signalled: dict[int, float] = {}

    @property
    def output(self) -> Path:
        return RunFolder(self.run_dir).slurm_output(self.id)

    def refresh(self) -> None:
        now = time.monotonic()
        if now - self._asked_at < QUEUE_SECONDS or self.finished_at is not None:
            return
        self._asked_at = now
        try:
            os.utime(self.heartbeat)  # tasks end themselves if this stops moving (the kernel died)
        except OSError:
            pass  # the run folder was removed: the tasks will end, which is what its owner wants
        try:
            result = subprocess.run(["squeue", "-h", "-t", "all", "-j", self.id, "-o", "%T|%r|%N"],
                                    capture_output=True, text=True, timeout=15)
        except subprocess.TimeoutExpired:
            return  # the controller is slow; ask again next time
        line = result.stdout.strip()
        if result.returncode == 0 and line:
            self.state, self.reason, self.nodes = (line.splitlines()[0].split("|") + ["", ""])[:3]
        elif "Invalid job id" in result.stderr or (result.returncode == 0 and not line):
            self.state = self.state if self.state in FINISHED_STATES else "GONE"  # purged after MinJobAge
        if self.state in FINISHED_STATES or self.state == "GONE":
            self.finished_at = now

    def read_reports(self) -> None:
        """srun's reports of ended tasks, read again whenever the job's output grows (one stat per call)."""
        try:
            size = self.output.stat().st_size
        except OSError:
            return
        if size != self._output_size:
            self._output_size, now = size, time.monotonic()
            for position, code in srun_exit_codes(self.output).items():
                self.reported.setdefault(position, (code, now))

    def signal(self, signum: int, every_time: bool = False) -> None:
        """Signal every task; SIGKILL cancels the job (a queued job is cancelled by any signal).

        Every task of the job asks (a stop ends each), so one scancel a second is enough, unless `every_time`
        (the caller asks once per job, and each request needs its own signal: stacks)."""
        if self.finished_at is not None or (
                not every_time and time.monotonic() - self._signalled.get(signum, float("-inf")) < 1.0):
            return
        self._signalled[signum] = time.monotonic()
        self.last_signal = signum
        if signum == signal.SIGKILL or self.state == "PENDING":
            command = ["scancel", self.id]
        else:
            command = ["scancel", f"--signal={signal.Signals(signum).name[3:]}", self.id]
        subprocess.run(command, capture_output=True, timeout=30)
        self._asked_at = float("-inf")  # look again at once

    def ready_for_stacks(self) -> bool:
        """Every task's bootstrap has set up its stacks handler (its stacks file exists): before that, the
        stacks signal, which scancel sends to all the job's tasks at once, would end a task."""
        folder = RunFolder(self.run_dir)
        return all(folder.stacks(position).exists() for position in range(self.size))

    def notes(self) -> list[str]:
        if self.state in ("COMPLETED", "GONE", "PENDING", "RUNNING") or self.last_signal is not None:
            return []
        tail = ""
        if self.output.exists():
            lines = [line for line in self.output.read_text(errors="replace").splitlines() if line.strip()]
            tail = "; Slurm said: " + " | ".join(lines[-3:]) if lines else ""
        return [f"Slurm job {self.id} ended {self.state}{tail}"]


class SlurmTask(TaskProcess):
    """One task of a job: its exit code comes from the file the task writes, or from the job's end."""

    def __init__(self, job: SlurmJob, position: int):
        self.job, self.position, self.pid = job, position, None
        self._placement: dict | None = None
        self._code: int | None = None

    def poll(self) -> int | None:
        if self._code is not None:
            return self._code
        self.job.refresh()
        exit_file = RunFolder(self.job.run_dir).slurm_exit(self.position)
        if exit_file.exists():
            text = exit_file.read_text().strip()
            if text:
                self._code = int(text)
                return self._code
        self.job.read_reports()
        code, seen_at = self.job.reported.get(self.position, (None, 0.0))
        # srun saw it end: by a signal (killed on its node), which leaves no exit file, or with a code
        # whose exit file has not come (its Python never ran)
        if code is not None and (code < 0 or time.monotonic() - seen_at > EXIT_FILE_SECONDS):
            self._code = code
            return self._code
        if self.job.finished_at is not None and time.monotonic() - self.job.finished_at > EXIT_FILE_SECONDS:
            # Ended before kwnb's bootstrap could record a code (its Python did not start, or a signal
            # came): srun's own report, else the signal we sent, else a kill (time limit, node failure).
            reported = srun_exit_codes(self.job.output).get(self.position)
            self._code = reported if reported is not None else -(self.job.last_signal or signal.SIGKILL)
        return self._code

    def signal(self, signum: int) -> None:
        self.job.signal(signum)

    def signal_scope(self) -> "SlurmJob":
        return self.job  # scancel reaches every task of the job

    def signal_task(self, signum: int) -> None:
        """The stacks signal, once each task of the job can take it (kwnb asks once per job: signal_scope)."""
        if signum != getattr(signal, STACKS_SIGNAL_NAME):
            self.job.signal(signum)
        elif self.job.ready_for_stacks():
            self.job.signal(signum, every_time=True)

    def stop(self, grace: float = 3.0) -> None:
        if self.poll() is None:
            super().stop(grace)

    def tf_config(self) -> dict | None:
        placement = self._placed()
        return placement["tf_config"] if placement else None

    def where(self) -> str:
        placement = self._placed()
        if placement:
            return f"job {self.job.id} on {placement['host']}, pid {placement['pid']}"
        if self.job.state == "PENDING":
            return f"job {self.job.id} pending" + (f" ({self.job.reason})" if self.job.reason not in ("", "None") else "")
        return f"job {self.job.id} {self.job.state.lower()}"

    def queued(self) -> bool:
        return self.job.state == "PENDING"

    def _placed(self) -> dict | None:
        if self._placement is None:
            path = RunFolder(self.job.run_dir).slurm_task(self.position)
            try:
                self._placement = json.loads(path.read_text())
            except (OSError, ValueError):
                return None
            self.pid = self._placement.get("pid")
        return self._placement


SRUN_TASK_END = re.compile(r"srun: error: \S+: tasks? ([\d,-]+): (?:Exited with exit code (\d+)|(Killed)|(Terminated))")


def srun_exit_codes(output: Path) -> dict[int, int]:
    """Exit codes srun reported in the job's output, e.g. 'srun: error: n1: tasks 0-1: Exited with exit code 127'."""
    try:
        text = output.read_text(errors="replace")
    except OSError:
        return {}
    codes = {}
    for match in SRUN_TASK_END.finditer(text):
        code = int(match[2]) if match[2] else -signal.SIGKILL if match[3] else -signal.SIGTERM
        for rank in expand_ranges(match[1]):
            codes[int(rank)] = code
    return codes


def _job_environment(task_env: dict[str, str]) -> dict[str, str]:
    """The tasks' environment without what only one task or only this machine should see."""
    env = {key: value for key, value in task_env.items() if key not in PER_TASK}
    # Submitting from inside an allocation (a notebook in an interactive job) would pass that
    # job's SLURM_* on to the new one, where sbatch and srun read them as settings.
    return {key: value for key, value in env.items() if not key.startswith("SLURM_") or key == "SLURM_CONF"}


def _missing(commands) -> list[str]:
    return [command for command in commands if not shutil.which(command)]


def _slurm_message(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    cleaned = [line.split("error: ", 1)[-1] for line in lines]
    return "; ".join(dict.fromkeys(cleaned))
